;;; fastrevert-engine.el --- fastrevert's engine thread and its records -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; The layer every other part of fastrevert stands on: the version, the
;; errors, loading the native module, and the engine thread it runs.
;;
;; The engine never calls Emacs.  It reports through a pipe process:
;; when records are waiting it writes one byte, and that process's
;; filter takes every waiting record in one module call, handing each
;; to the handler registered for its kind.  The auto-revert front
;; (fastrevert.el) and the process layer (fastrevert-process.el,
;; fastrevert-call.el) register their handlers here; neither needs the
;; other.
;;
;; Nothing here needs the module to load or to byte-compile: it is
;; loaded on first use, when `fastrevert-mode' is turned on or a native
;; primitive is first called, and built then if it is missing (see
;; fastrevert-compile.el).

;;; Code:

(defconst fastrevert-version "0.1.0"
  "The version of the fastrevert Lisp package.
The native module must have been built as the same version, which
the \"Version:\" header of fastrevert.el gives the build.")

(defgroup fastrevert nil
  "Native auto-revert and process output."
  :group 'files
  :prefix "fastrevert-")

(defcustom fastrevert-always-compile-module nil
  "Non-nil means build a missing native module without asking.
Otherwise fastrevert asks, once, when the module is first needed;
batch Emacs is never asked, and gets an error naming the command
that builds the module."
  :type 'boolean)

(defcustom fastrevert-module-file nil
  "A prebuilt native module to load, or nil to find or build one.
For distributions that ship the module built: it must have been
built from this version of fastrevert, and fastrevert never builds
one in its place."
  :type '(choice (const :tag "Find or build it" nil) file))

;;;; Errors

(define-error 'fastrevert-error "fastrevert error")
(define-error 'fastrevert-system-error "fastrevert system call failed" 'fastrevert-error)
(define-error 'fastrevert-not-running "fastrevert engine not running" 'fastrevert-error)
;; What stands between the user and the module: the data of each is a
;; message that says what to do.
(define-error 'fastrevert-module-version-mismatch
  "fastrevert module does not match its Lisp" 'fastrevert-error)
(define-error 'fastrevert-module-missing "fastrevert module not built" 'fastrevert-error)
(define-error 'fastrevert-module-build-failed "fastrevert module build failed" 'fastrevert-error)
(defconst fastrevert--module-errors
  '(fastrevert-module-version-mismatch fastrevert-module-missing fastrevert-module-build-failed)
  "The errors that say why the module cannot be loaded, each with its message.")

(when (< emacs-major-version 28)
  (error "Fastrevert needs Emacs 28 or later (it uses the module API's open_channel)"))

;;;; Where the native module is

(defconst fastrevert--lisp-directory
  (file-name-directory (or load-file-name buffer-file-name default-directory))
  "The directory fastrevert's Lisp is loaded from.
The module is looked for there first, and built there when the
directory is writable.")

(defun fastrevert--module-file-name ()
  "Return the name of this version's module file, without a directory.
It carries the version, so that no other version's build is ever
taken for it."
  (concat "fastrevert-module-" fastrevert-version module-file-suffix))

(defun fastrevert--user-module-directory ()
  "Return the folder for this version's module under `user-emacs-directory'.
A module goes there when fastrevert's Lisp directory is read-only."
  (file-name-as-directory
   (expand-file-name (concat "fastrevert/" fastrevert-version) user-emacs-directory)))

(defun fastrevert--module-target-directory ()
  "Return the directory a build writes the module to."
  (if (file-writable-p fastrevert--lisp-directory)
      fastrevert--lisp-directory
    (fastrevert--user-module-directory)))

(defun fastrevert--find-module ()
  "Return the module file to load, or nil if there is none yet.
That is `fastrevert-module-file' when set, else this version's module
next to the Lisp or under `user-emacs-directory'."
  (if fastrevert-module-file
      (let ((file (expand-file-name fastrevert-module-file)))
        (unless (file-exists-p file)
          (signal 'fastrevert-module-missing
                  (list (format "`fastrevert-module-file' names %s, which does not exist"
                                file))))
        file)
    (let ((found nil))
      (dolist (directory (list fastrevert--lisp-directory (fastrevert--user-module-directory)))
        (let ((file (expand-file-name (fastrevert--module-file-name) directory)))
          (when (and (not found) (file-exists-p file))
            (setq found file))))
      found)))

;;;; Loading the native module

;; Until the module is loaded, each native primitive is a stub that
;; loads it (building it first if need be) and calls the primitive
;; the module defined in its place.  Loading the module replaces them
;; all.  A few answer for an engine that cannot be running without
;; loading anything.

(defconst fastrevert--module-functions
  '(fastrevert--mod-accessible-directory-p fastrevert--mod-call-process
    fastrevert--mod-drain fastrevert--mod-echo fastrevert--mod-first-executable
    fastrevert--mod-hold-wakes fastrevert--mod-json-to-lisp fastrevert--mod-lisp-file
    fastrevert--mod-lisp-file-done fastrevert--mod-module-api
    fastrevert--mod-process-attach
    fastrevert--mod-process-backlog fastrevert--mod-process-ended fastrevert--mod-process-eof
    fastrevert--mod-process-remove fastrevert--mod-process-send fastrevert--mod-process-signal
    fastrevert--mod-process-start fastrevert--mod-running-p
    fastrevert--mod-set-wake-process fastrevert--mod-signal-number fastrevert--mod-start
    fastrevert--mod-stats fastrevert--mod-stop fastrevert--mod-strerror
    fastrevert--mod-strsignal fastrevert--mod-test-delayed-stats
    fastrevert--mod-test-throw fastrevert--mod-test-watch-fault fastrevert--mod-version
    fastrevert--mod-wait fastrevert--mod-wait-drain fastrevert--mod-watch-add
    fastrevert--mod-watch-backend
    fastrevert--mod-watch-configure fastrevert--mod-watch-hold-limit
    fastrevert--mod-watch-remove fastrevert--mod-watch-vc-info
    fastrevert--mod-watch-visible)
  "Every function the native module defines.")

(defconst fastrevert--module-idle-functions
  '(fastrevert--mod-running-p fastrevert--mod-stats fastrevert--mod-stop)
  "Native functions that return nil, loading nothing, before the module is loaded.
Each asks about, or stops, an engine that cannot run without it.")

(declare-function fastrevert--mod-version "fastrevert-module" ())
(declare-function fastrevert--mod-module-api "fastrevert-module" ())
(declare-function fastrevert--mod-start "fastrevert-module" (pipe-process))
(declare-function fastrevert--mod-stop "fastrevert-module" (&optional timeout))
(declare-function fastrevert--mod-running-p "fastrevert-module" ())
(declare-function fastrevert--mod-drain "fastrevert-module" (handler))
(declare-function fastrevert--mod-stats "fastrevert-module" ())
(declare-function fastrevert-module--build "fastrevert-compile" (wait then))
(declare-function fastrevert-module--build-command "fastrevert-compile" ())
(declare-function fastrevert-module--last-failure "fastrevert-compile" ())
;; The build, and `compile' with it, is loaded only when it is needed.
(autoload 'fastrevert-module--build "fastrevert-compile")
(autoload 'fastrevert-module--build-command "fastrevert-compile")

(defun fastrevert--module-stub (name)
  "Return the stub to stand for native function NAME until the module is loaded."
  (if (memq name fastrevert--module-idle-functions)
      (lambda (&rest _) nil)
    (lambda (&rest args)
      (fastrevert--module-ready)
      (when (fastrevert--module-stub-p name)
        (signal 'fastrevert-error
                (list (format "The fastrevert module defines no `%s'" name))))
      (apply name args))))

(defun fastrevert--module-stub-p (name)
  "Return non-nil if native function NAME is still its stub."
  (let ((stub (get name 'fastrevert--stub)))
    (and stub (eq (symbol-function name) stub))))

;; `fset' rather than `defalias': the stubs belong to no file, so that
;; unloading this one leaves the module's functions, which replaced
;; them, in place.
(dolist (name fastrevert--module-functions)
  (unless (fboundp name)
    (let ((stub (fastrevert--module-stub name)))
      (put name 'fastrevert--stub stub)
      (fset name stub))))

(defvar fastrevert--module-loaded-file nil
  "The module file this Emacs loaded, or nil.")

(defun fastrevert--module-loaded-p ()
  "Return non-nil if a fastrevert module is loaded in this Emacs, of any version."
  (and (featurep 'fastrevert-module)
       (fboundp 'fastrevert--mod-version)
       (not (fastrevert--module-stub-p 'fastrevert--mod-version))))

(defun fastrevert--check-module-version (module-version)
  "Signal an error unless MODULE-VERSION is `fastrevert-version'.
A module cannot be unloaded: one of another version, once loaded,
stays until Emacs exits."
  (unless (equal module-version fastrevert-version)
    (signal 'fastrevert-module-version-mismatch
            (list (format "This Emacs has loaded the module of fastrevert %s, \
but its Lisp is now version %s: restart Emacs to use %s"
                          module-version fastrevert-version fastrevert-version)))))

(defun fastrevert--missing-module-message ()
  "Return the text to say that the module is missing, and how to build it."
  (format "The fastrevert native module %s is not built.  Build it with \
M-x fastrevert-module-compile, or set `fastrevert-always-compile-module' to \
build it when needed, or run:  %s"
          (fastrevert--module-file-name) (fastrevert-module--build-command)))

(defun fastrevert--load-module ()
  "Load this version's module; signal an error if it cannot be loaded.
The error is `fastrevert-module-missing' when there is no module to
load, and `fastrevert-module-version-mismatch' when this Emacs has
loaded a module of another version."
  (cond ((fastrevert--module-loaded-p)
         (fastrevert--check-module-version (fastrevert--mod-version)))
        ((not module-file-suffix)
         (signal 'fastrevert-error
                 '("Fastrevert needs an Emacs built with dynamic module support")))
        (t
         (let ((file (fastrevert--find-module)))
           (unless file
             (signal 'fastrevert-module-missing (list (fastrevert--missing-module-message))))
           (load file nil t t)
           (setq fastrevert--module-loaded-file file)
           (fastrevert--check-module-version (fastrevert--mod-version))))))

(defvar fastrevert--build-answer nil
  "The answer to the one question whether to build the module, or nil.
It is `yes' or `no' once asked in this Emacs.")

(defun fastrevert--build-allowed-p (in-background)
  "Return non-nil if the missing module may be built now.
It may when `fastrevert-always-compile-module' is set, or, in an
interactive Emacs, when the user says so; the question is asked at
most once.  IN-BACKGROUND non-nil says the build would not be waited
for."
  (cond (fastrevert-module-file nil)
        (fastrevert-always-compile-module t)
        (noninteractive nil)
        (fastrevert--build-answer (eq fastrevert--build-answer 'yes))
        (t (setq fastrevert--build-answer
                 (if (y-or-n-p
                      (format "The fastrevert native module is not built; build it now \
with CMake (about a minute%s)? "
                              (if in-background ", in the background" "")))
                     'yes 'no))
           (eq fastrevert--build-answer 'yes))))

(defvar fastrevert--build-in-background 'unless-batch
  "Whether turning a mode on may build the module in the background.
`unless-batch' means so in an interactive Emacs; batch Emacs waits for
the build, since it has no command loop to come back to.  t and nil
mean always and never.")

(defun fastrevert--module-ready (&optional then)
  "Load the module, building it first if it is missing; return non-nil if loaded.
Without THEN, a build is waited for, and any failure signals an error.
With THEN, a function of no argument, a build may run in the
background instead (see `fastrevert--build-in-background'): the value
is then nil, and THEN is called once the build has loaded the module.
A missing module that may not be built signals `fastrevert-module-missing'."
  (condition-case err
      (progn (fastrevert--load-module) t)
    (fastrevert-module-missing
     (let ((in-background (and then (if (eq fastrevert--build-in-background 'unless-batch)
                                         (not noninteractive)
                                       fastrevert--build-in-background))))
       ;; A build that failed is tried again when asked for, by the mode
       ;; or the command, not at each call of a primitive.
       (let ((failure (and (not then) (featurep 'fastrevert-compile)
                           (fastrevert-module--last-failure))))
         (when failure
           (signal 'fastrevert-module-build-failed (list failure))))
       (unless (fastrevert--build-allowed-p in-background)
         (signal (car err) (cdr err)))
       (fastrevert-module--build (not in-background) (and in-background then))
       (and (not in-background) (fastrevert--module-loaded-p))))))

;; A newer version's Lisp loaded over an older one (package.el reloads
;; an upgraded package's files) finds the older module in place.
(when (and (fastrevert--module-loaded-p)
           (not (equal (fastrevert--mod-version) fastrevert-version)))
  (display-warning
   'fastrevert
   (format "fastrevert %s is loaded, but this Emacs runs the module of %s, \
which cannot be unloaded: restart Emacs to use fastrevert %s"
           fastrevert-version (fastrevert--mod-version) fastrevert-version)))

;;;; Records

;; The engine reports in records of four fields: KIND, ID, CODE and
;; DATA.  The constants below name what the native side puts in them:
;; the enum `RecordKind' of module/core/engine.h, the codes and the
;; layout of the process table's `process-output' records, and the
;; words of its `process-exit' records (`exit_how_name' in
;; module/core/child.h).  They change together with it.

(defconst fastrevert--record-kinds
  [echo notice file-changed file-watched process-ready vc-changed]
  "The kinds of engine records, each at the index of its `RecordKind' value.
The module hands a record's kind to Lisp as this symbol.")

(defconst fastrevert--watched-check-held 1
  "The code of a `file-watched' record whose first check waits.
The file's repository is in a VCS operation; a `file-changed' record
for it follows when the operation ends.")

(defconst fastrevert--vc-changed-head 1
  "The bit of a `vc-changed' record's code for a moved HEAD.
HEAD, the branch it names, or Mercurial's branch or bookmarks changed.")

(defconst fastrevert--vc-changed-index 2
  "The bit of a `vc-changed' record's code for a changed index.
Git's index or Mercurial's dirstate changed; these are watched only
while `auto-revert-check-vc-info' is non-nil.")

(defconst fastrevert--output-stdout 1
  "The stream number of standard output, as process output is delivered.")

(defconst fastrevert--output-stderr 2
  "The stream number of standard error, as process output is delivered.")

(defconst fastrevert--exit-exited "exited"
  "The data of a `process-exit' record of a child that exited.
The record's code is the exit code.")

(defconst fastrevert--exit-signaled "signaled"
  "The data of a `process-exit' record of a child killed by a signal.
The record's code is the signal's number.")

(defconst fastrevert--exit-core-dumped "core-dumped"
  "The data of a `process-exit' record of a child killed with a core dump.
The record's code is the signal's number.")

(defconst fastrevert--exit-lost "lost"
  "The data of a `process-exit' record of a child whose status is lost.
Something else reaped it (SIGCHLD ignored), or the engine could not
take it over; the record's code is -1.")

(defun fastrevert--exit-signaled-p (how)
  "Return non-nil if HOW, the data of a `process-exit' record, is a signal's."
  (or (equal how fastrevert--exit-signaled) (equal how fastrevert--exit-core-dumped)))

;;;; The engine

(declare-function fastrevert--mod-set-wake-process "fastrevert-module" (pipe-process))

(defvar fastrevert--wake-process nil
  "The pipe process through which the engine wakes Emacs.")

(defvar fastrevert--engine-generation 0
  "How many times an engine has been started in this Emacs.
A process or watch made under an earlier generation died with the
engine that ran it.")

(defvar fastrevert--engine-started-hook nil
  "Functions run after an engine was started anew, with no argument.
A new engine holds no watch and no process: the functions register
again what should be.")

(defvar fastrevert--engine-stopped-hook nil
  "Functions run after the engine was stopped, with no argument.
Stopping killed its processes; the functions report their end.")

(defvar fastrevert--record-handlers nil
  "Alist mapping an engine result kind (a symbol) to its handler.
A handler is called with the result's ID, CODE and DATA.")

(defun fastrevert--dispatch (kind id code data)
  "Hand one engine result to the handler registered for KIND.
ID, CODE and DATA are the result's fields; DATA is a unibyte string,
decoded here as UTF-8 for the kinds that carry text."
  (when (memq kind '(echo notice process-error))
    (setq data (decode-coding-string data 'utf-8-unix)))
  (let ((handler (alist-get kind fastrevert--record-handlers)))
    (cond (handler (funcall handler id code data))
          ((eq kind 'notice) (message "%s" data)))))

(defvar fastrevert--match-data-kept nil
  "Non-nil while the match data of the code that a drain interrupts are kept.
Emacs keeps them around a process filter, such as the wake process's,
and the engine's own waits keep them once for all they deliver; the
filters and sentinels called meanwhile need not each save them again.")

(defmacro fastrevert--keeping-match-data (&rest body)
  "Run BODY, a drain or a wait, with the match data saved once for all of it.
See `fastrevert--match-data-kept'."
  (declare (indent 0) (debug t))
  `(save-match-data
     (let ((fastrevert--match-data-kept t))
       ,@body)))

(defun fastrevert--drain ()
  "Handle every result the engine has ready; return how many.
Quitting is inhibited meanwhile, as it is while Emacs runs a process
filter: a quit typed then is taken once the piece of output being
delivered has been.  The module counts the time spent (`:drain-ns'
of its statistics), except when a handler exits non-locally."
  (let ((inhibit-quit t))
    (fastrevert--mod-drain #'fastrevert--dispatch)))

(defun fastrevert--wake-filter (_process _bytes)
  "Drain the engine when it writes its wake byte.
Emacs keeps the match data around this filter, as around any."
  (let ((fastrevert--match-data-kept t))
    (fastrevert--drain)))

(defun fastrevert--wake-sentinel (process _event)
  "Make a new wake process when PROCESS, the current one, has died.
Deleting every process, a common idiom, deletes it too.  The engine
goes on with every watch and process it holds, and wakes the new
one instead."
  (when (and (eq process fastrevert--wake-process)
             (not (process-live-p process))
             (fastrevert--mod-running-p))
    (fastrevert--wake-renew)))

(defun fastrevert--engine-live-p ()
  "Return non-nil if the engine and its wake process are running."
  (and (fastrevert--mod-running-p)
       (process-live-p fastrevert--wake-process)))

(defun fastrevert--make-wake-process ()
  "Return a new pipe process for the engine to wake Emacs through."
  ;; Adaptive read buffering would hold back the one-byte wakes for tens
  ;; of milliseconds; each must be read at once.
  (let ((process-adaptive-read-buffering nil))
    (make-pipe-process :name " *fastrevert-wake*"
                       :buffer nil
                       :coding 'binary
                       :noquery t
                       :filter #'fastrevert--wake-filter
                       :sentinel #'fastrevert--wake-sentinel)))

(defun fastrevert--wake-renew ()
  "Give the running engine a new wake process in place of a dead one."
  (let ((old fastrevert--wake-process))
    (setq fastrevert--wake-process (fastrevert--make-wake-process))
    (fastrevert--mod-set-wake-process fastrevert--wake-process)
    (when (and (processp old) (not (eq old fastrevert--wake-process)))
      (delete-process old))))

(defun fastrevert--engine-ensure ()
  "Start the engine unless it is running already.
An engine whose wake process died gets a new one and keeps all it
holds; an engine started anew runs `fastrevert--engine-started-hook'."
  (cond ((fastrevert--engine-live-p))
        ((fastrevert--mod-running-p) (fastrevert--wake-renew))
        (t
         ;; Loaded (or built) before anything is made for it.
         (fastrevert--module-ready)
         (fastrevert--engine-stop)
         (setq fastrevert--wake-process (fastrevert--make-wake-process))
         (fastrevert--mod-start fastrevert--wake-process)
         (setq fastrevert--engine-generation (1+ fastrevert--engine-generation))
         (add-hook 'kill-emacs-hook #'fastrevert--engine-stop-at-exit)
         (run-hooks 'fastrevert--engine-started-hook))))

(defun fastrevert--engine-stop-at-exit ()
  "Stop the engine as Emacs exits, without waiting on a hung file system."
  (when (eq (fastrevert--mod-stop 2) 'abandoned)
    (message "fastrevert: a file system is not responding; not waiting for it")))

(defun fastrevert--engine-stop ()
  "Stop the engine thread and delete its wake process.
The engine's processes are killed; `fastrevert--engine-stopped-hook'
tells their sentinels."
  (fastrevert--mod-stop)
  (let ((process fastrevert--wake-process))
    ;; Cleared first, so that its sentinel does not make a new one.
    (setq fastrevert--wake-process nil)
    (when (processp process)
      (delete-process process)))
  (run-hooks 'fastrevert--engine-stopped-hook))

;;;; Waiting for records

(declare-function fastrevert--mod-wait-drain "fastrevert-module" (seconds handler))
(declare-function fastrevert--mod-hold-wakes "fastrevert-module" (hold))

(defconst fastrevert--wait-slice 0.02
  "Seconds `fastrevert--wait-for' waits natively at a time.
Between slices Emacs runs its timers and other processes' filters.")

(defvar fastrevert--last-yield 0.0
  "When `fastrevert--yield' last ran, as a `float-time'.")

(defun fastrevert--wait-for (predicate deadline just-this-one)
  "Handle the engine's results until a call of PREDICATE is non-nil.
Return PREDICATE's last value: nil when the wait ended at DEADLINE,
a `float-time' (nil means no deadline).  PREDICATE is called with no
argument before each slice of waiting.  JUST-THIS-ONE is as for
`accept-process-output'.

The wait is native: the engine's results are taken as soon as they
are ready, not when Emacs's event loop next reads the wake pipe.  It
happens in slices of `fastrevert--wait-slice' seconds; at least that
often, Emacs runs what JUST-THIS-ONE allows (see `fastrevert--yield'),
however busy the engine.  The caller's match data are kept."
  (fastrevert--keeping-match-data
    (let ((got nil)
          (done nil)
          (drained nil))
      (while (not done)
        ;; One call drains what is ready, or waits up to a slice for it and
        ;; drains it then.  A quit ends the wait, and is taken as the
        ;; binding ends, after any output being delivered was.
        (let ((handled (let ((inhibit-quit t))
                         (fastrevert--mod-wait-drain
                          (if deadline
                              (max 0 (min fastrevert--wait-slice (- deadline (float-time))))
                            fastrevert--wait-slice)
                          #'fastrevert--dispatch))))
          (when (> handled 0) (setq drained t))
          (setq got (funcall predicate))
          (cond ((or got (and deadline (<= deadline (float-time))))
                 (setq done t))
                ((zerop handled)
                 (fastrevert--yield just-this-one)
                 (setq drained nil))))
        ;; An engine that keeps results ready, call after call, must not
        ;; keep timers from running: they get their turn at least once a
        ;; slice.
        (when (>= (- (float-time) fastrevert--last-yield) fastrevert--wait-slice)
          (fastrevert--yield just-this-one)
          (setq drained nil)))
      (when drained (fastrevert--take-wake))
      got)))

(defun fastrevert--take-wake ()
  "Read the wake byte the engine wrote for results this wait took itself.
Left in the pipe, it would be input pending that nothing reads: Emacs
runs a process's sentinel only when no input is pending, and
`accept-process-output' on a process that has exited returns without
reading any, so a loop waiting that way for a stock process's sentinel
would wait forever.  Runs no timer and no other process's filter."
  (let ((wake fastrevert--wake-process))
    (when (process-live-p wake)
      (fastrevert--mod-hold-wakes t)
      (unwind-protect
          (accept-process-output wake 0 nil 1)
        (fastrevert--mod-hold-wakes nil)))))

(defun fastrevert--yield (just-this-one)
  "Let Emacs run what a wait may run meanwhile, without waiting.
With JUST-THIS-ONE nil, timers and every process's filters run; with
another non-integer, timers only; with an integer, nothing."
  (setq fastrevert--last-yield (float-time))
  (let ((wake fastrevert--wake-process))
    (cond ((integerp just-this-one))
          ((not (process-live-p wake))
           (unless just-this-one (accept-process-output nil 0)))
          (t
           ;; The wait drains the engine itself.  Meanwhile no wake byte
           ;; is written: a busy stream would keep the pipe readable, and
           ;; Emacs reads a pipe for as long as it stays readable.
           (fastrevert--mod-hold-wakes t)
           (unwind-protect
               ;; Waiting on the wake pipe alone runs timers only.
               (accept-process-output (and just-this-one wake) 0 nil just-this-one)
             (fastrevert--mod-hold-wakes nil))))))

(defun fastrevert-engine-unload-function ()
  "Stop the engine, for `unload-feature' of this library.
Its wake process is deleted and its processes are killed (their
sentinels are told).  Return nil, so that `unload-feature' goes on to
remove the rest."
  (fastrevert--engine-stop)
  (remove-hook 'kill-emacs-hook #'fastrevert--engine-stop-at-exit)
  nil)

(provide 'fastrevert-engine)

;;; fastrevert-engine.el ends here
