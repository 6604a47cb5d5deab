;;; fastrevert-process.el --- Child processes the engine reads -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; Keywords: processes

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; `fastrevert-make-process' takes the keywords of `make-process' (plus
;; :framing) and returns a `fastrevert-process', which the
;; `fastrevert-process-*' companions handle as their stock namesakes
;; handle a process.  The engine thread reads the child's output and
;; hands it to Emacs in batches: a filter is called once per piece of
;; output that gathered, however many small writes the child made, and a
;; child that streams gives pieces of 64 KiB or more.  With :framing
;; `lines' a filter only ever sees complete lines, and with `lsp' only
;; complete Content-Length messages.  UTF-8 output that comes as
;; strings is decoded by the module as it makes the string.  Output for
;; a buffer (no filter) takes the road `fastrevert-call-process' takes:
;; past its first 16 KiB the engine appends it to a memfd, and Emacs
;; inserts each new range with `insert-file-contents' at the process
;; mark, so no Lisp string is made for it.  Unframed output for a filter
;; takes the memfd too, read into a scratch buffer and taken from there
;; as the one string the filter gets.
;;
;; This file holds the process object, how the engine's pieces of its
;; output and its end reach its filter, buffer and sentinel, and the
;; companions.  How a child is started as stock starts it is in
;; fastrevert-child.el, and how its bytes become text in
;; fastrevert-decode.el.

;;; Code:

(require 'cl-lib)
(require 'fastrevert-engine)
(require 'fastrevert-child)
(require 'fastrevert-decode)

(declare-function fastrevert--mod-process-start "fastrevert-module"
                  (id program argv env cwd stdin stdout stderr framing read-size
                      process decoding backlog))
(declare-function fastrevert--mod-process-backlog "fastrevert-module" (id))
(declare-function fastrevert--mod-process-send "fastrevert-module" (id string))
(declare-function fastrevert--mod-process-eof "fastrevert-module" (id))
(declare-function fastrevert--mod-process-signal "fastrevert-module" (id signal))
(declare-function fastrevert--mod-process-remove "fastrevert-module" (id))
(declare-function fastrevert--mod-signal-number "fastrevert-module" (name))
(declare-function fastrevert--mod-strsignal "fastrevert-module" (signal))

;;;; The process object


(cl-defstruct (fastrevert-process
               (:constructor fastrevert--process-create)
               ;; Positional, for `fastrevert-make-process': keyword
               ;; arguments would cost a list and a search per call.
               (:constructor fastrevert--process-start-record
                             (id name command buffer mark stderr-buffer stderr-mark
                                 filter sentinel decoding encoding query-on-exit engine))
               (:conc-name fastrevert--process-)
               (:predicate fastrevert-process-p)
               (:copier nil)
               ;; Its slots DECODING, TAILS and STATES.
               (:include fastrevert--decoder))
  "A child process run by fastrevert's engine.
Use the `fastrevert-process-*' functions rather than the slots."
  (id nil :documentation "The engine's id for the process.")
  (name nil :documentation "The process name, unique among fastrevert processes.")
  (command nil :documentation "The command line, a list of strings.")
  (pid nil :documentation "The process id of the child.")
  (buffer nil :documentation "The buffer output goes to, or nil.")
  (mark nil :documentation "The process mark in BUFFER.")
  (stderr-buffer nil :documentation "The buffer (or pipe process) for standard error, or nil.")
  (stderr-mark nil :documentation "The mark in STDERR-BUFFER, when it is a buffer.")
  (filter nil :documentation "The filter function, or nil.")
  (sentinel nil :documentation "The sentinel function, or nil.")
  (encoding nil :documentation "The coding system that encodes input.")
  (status 'run :documentation "One of `run', `exit' or `signal'.")
  (exit-status 0 :documentation "The exit code or signal number.")
  (core-dumped nil :documentation "Non-nil if the child dumped core.")
  (query-on-exit t :documentation "Non-nil to ask before Emacs kills it.")
  (outputs 0 :documentation "Counts batches of output as they are delivered.
It also moves when output arrives that must wait for the filter to
return, so that a wait for output in the filter sees it has come.")
  (plist nil :documentation "A property list for the caller.")
  (engine nil :documentation "The `fastrevert--engine-generation' this started in.
A restarted engine has forgotten the process (stopping it killed the
child), which this tells apart."))

(cl-defmethod cl-print-object ((process fastrevert-process) stream)
  "Print PROCESS to STREAM by name, as Emacs prints a process."
  (princ (format "#<fastrevert-process %s>" (fastrevert--process-name process)) stream))

(defconst fastrevert--memfd-threshold 16384
  "How many bytes of unframed standard output come before a memfd does.
Past them, the engine writes the rest to a memfd (`kMemfdThreshold'
in the module's process table).")

(defvar fastrevert--processes (make-hash-table :test #'eql)
  "Live fastrevert processes by engine id.")

(defvar fastrevert--process-output-count 0
  "How many batches of process output have been delivered, in total.")

(defvar fastrevert--process-names (make-hash-table :test #'equal)
  "Name -> the fastrevert process of that name in `fastrevert--processes'.")

(defun fastrevert--process-unique-name (name)
  "Return NAME, or NAME<N> if a fastrevert process has that name.
N counts from 1, as `make-process' numbers its processes."
  (let ((candidate name)
        (n 0))
    (while (gethash candidate fastrevert--process-names)
      (setq n (1+ n)
            candidate (format "%s<%d>" name n)))
    candidate))

(defun fastrevert--process-forget (process)
  "Remove PROCESS from the tables of live fastrevert processes."
  (remhash (fastrevert--process-id process) fastrevert--processes)
  (let ((name (fastrevert--process-name process)))
    (when (eq (gethash name fastrevert--process-names) process)
      (remhash name fastrevert--process-names))))

(defun fastrevert--process-check (process)
  "Signal `wrong-type-argument' unless PROCESS is a `fastrevert-process'."
  (unless (fastrevert-process-p process)
    (signal 'wrong-type-argument (list 'fastrevert-process-p process))))

;;;; Delivering output

;; The module delivers each process's output, and then its end, by calling
;; the `fastrevert--deliver-*' functions below, one piece at a time and in
;; the order the child wrote it (see `fastrevert--mod-drain').  A process's
;; deliveries never overlap: while its filter runs (say, waiting for more
;; output), what else comes for it waits in the engine, within the
;; process's backlog, and is delivered once the filter returns.  A piece
;; stays in the engine until it has been handed on: a delivery interrupted
;; before then (a quit) leaves it to the next.

(defvar fastrevert--handed nil
  "Non-nil once the piece of output being delivered has been handed on.
The module clears it before each piece and reads it when a delivery
exits non-locally: a piece handed on (to a filter, into a buffer, to
a sentinel) counts as delivered, any other is delivered again.")

(defun fastrevert--process-call (kind function &rest args)
  "Call FUNCTION with ARGS as a process KIND, in the stock manner.
KIND is \"filter\" or \"sentinel\".
An error is reported rather than propagated, unless `debug-on-error'
asks for the debugger, and the match data are preserved (by the drain
that calls it, when `fastrevert--match-data-kept' says it keeps them)."
  (setq fastrevert--handed t)
  (if fastrevert--match-data-kept
      (fastrevert--process-call-1 kind function args)
    (save-match-data (fastrevert--process-call-1 kind function args))))

(defun fastrevert--process-call-1 (kind function args)
  "Call FUNCTION with ARGS as a process KIND; report an error it signals."
  (condition-case-unless-debug err
      (apply function args)
    (error (message "error in process %s: %s" kind (error-message-string err)))))

(defun fastrevert--process-count-output (process)
  "Count one batch of output of PROCESS as delivered."
  (setf (fastrevert--process-outputs process) (1+ (fastrevert--process-outputs process)))
  (setq fastrevert--process-output-count (1+ fastrevert--process-output-count)))

(defun fastrevert--process-insert (buffer mark text &optional detected)
  "Insert TEXT into BUFFER at MARK, as `fastrevert--insert-output' does.
The piece being delivered is handed on from here."
  (setq fastrevert--handed t)
  (fastrevert--insert-output buffer mark text detected))

(defun fastrevert--process-deliver (process stream text &optional detected)
  "Deliver TEXT, output of PROCESS on STREAM, to its consumer.
STREAM is `fastrevert--output-stdout' or `fastrevert--output-stderr'.
DETECTED is as for `fastrevert--insert-output'."
  (unless (equal text "")
    (fastrevert--process-count-output process)
    (if (eql stream fastrevert--output-stderr)
        (let ((target (fastrevert--process-stderr-buffer process)))
          (if (processp target)
              ;; A pipe process given as :stderr gets it as its own
              ;; output, as with stock Emacs.
              (when (process-live-p target)
                (fastrevert--process-call
                 "filter" (or (process-filter target) #'internal-default-process-filter)
                 target text))
            (fastrevert--process-insert target (fastrevert--process-stderr-mark process)
                                        text detected)))
      (let ((filter (fastrevert--process-filter process)))
        (if filter
            (fastrevert--process-call
             "filter" filter process
             ;; ASCII comes unibyte, from the module or from decoding,
             ;; which gives it back; a buffer takes it as it is, but a
             ;; stock filter gets a multibyte string from any coding
             ;; system but the raw-text family.
             (if (or (multibyte-string-p text)
                     (eq (coding-system-type (fastrevert--process-decoding process)) 'raw-text))
                 text
               (string-to-multibyte text)))
          (fastrevert--process-insert (fastrevert--process-buffer process)
                                      (fastrevert--process-mark process) text detected))))))

(defun fastrevert--process-decode-and-deliver (process stream data eof)
  "Decode DATA, output of PROCESS on STREAM, and deliver it.
EOF is as for `fastrevert--process-decode'."
  (let* ((coding (fastrevert--process-decoding process))
         (text (fastrevert--process-decode process stream data eof)))
    (fastrevert--process-deliver
     process stream text
     ;; Detection settles a coding system of another kind; finding only
     ;; the end-of-line convention keeps the kind.
     (not (eq (coding-system-base coding)
              (coding-system-base (fastrevert--process-decoding process)))))))

(defun fastrevert--deliver-text (process stream text kind)
  "Deliver TEXT, output of PROCESS on STREAM (1 standard output, 2 error).
KIND says what TEXT is: nil, the text itself (decoded by the module,
or raw bytes for a raw-text coding; ASCII may come unibyte); `whole',
bytes that end where a character ends, to decode with the process's
coding system; `part', bytes to decode holding back the start of a
character that has not ended.  Runs with quitting inhibited, as stock
runs a filter: a quit typed meanwhile is taken once the text has been
delivered."
  (let ((inhibit-quit t))
    (pcase kind
      ('nil (fastrevert--process-deliver process stream text))
      ('whole (fastrevert--process-deliver
               process stream
               (decode-coding-string text (fastrevert--process-decoding process) t)))
      (_ (fastrevert--process-decode-and-deliver process stream text nil)))))

(defvar fastrevert--memfd-scratch nil
  "The buffer where `fastrevert--memfd-text' reads a memfd's bytes.")

(defun fastrevert--memfd-text (process fd from to)
  "Return bytes [FROM, TO) of the memfd FD, output of PROCESS, as text.
The text is what a stock filter gets: decoded with the process's
coding system, multibyte but for the raw-text family.  The bytes go
from the memfd into a scratch buffer, decoded there, and the one
string made is the text: a string of the bytes, decoded into another,
would make Emacs allocate twice as much."
  (let* ((coding (fastrevert--process-decoding process))
         (raw (eq (coding-system-type coding) 'raw-text))
         (inhibit-modification-hooks t))
    (unless (buffer-live-p fastrevert--memfd-scratch)
      (setq fastrevert--memfd-scratch (generate-new-buffer " *fastrevert-memfd*" t)))
    (with-current-buffer fastrevert--memfd-scratch
      (setq buffer-undo-list t)
      (erase-buffer)
      (unless (eq enable-multibyte-characters (not raw))
        (set-buffer-multibyte (not raw)))
      (if raw
          (let ((file-name-handler-alist nil))
            (insert-file-contents-literally (fastrevert--memfd-file-name fd) nil from to))
        ;; A coding system that reaches the memfd detects nothing.
        (fastrevert--insert-memfd-range fd from to coding))
      (prog1 (buffer-substring-no-properties (point-min) (point-max))
        (erase-buffer)))))

(defun fastrevert--deliver-range (process fd from to)
  "Deliver bytes [FROM, TO) of the memfd FD, output of PROCESS.
A filter gets them as text (see `fastrevert--memfd-text').  The module
holds back an unfinished character, so the bytes decode whole.  Into a
live multibyte buffer they go straight from the memfd; into a unibyte
buffer they take the road of text.  Runs with quitting inhibited, as
stock runs a filter."
  (let ((inhibit-quit t)
        (buffer (fastrevert--process-buffer process))
        (coding (fastrevert--process-decoding process)))
    (cond ((fastrevert--process-filter process)
           (fastrevert--process-deliver process fastrevert--output-stdout
                                        (fastrevert--memfd-text process fd from to)))
          ((not (buffer-live-p buffer))
           ;; The default filter drops output for a killed buffer.
           (fastrevert--process-count-output process))
          ((and (buffer-local-value 'enable-multibyte-characters buffer)
                (not (fastrevert--detection-moves-markers-p coding)))
           (fastrevert--process-count-output process)
           (fastrevert--process-insert
            buffer (fastrevert--process-mark process)
            (lambda ()
              ;; Decoding fixes what `undecided' detected, as Emacs does
              ;; for a process.
              (let ((used (fastrevert--insert-memfd-range fd from to coding t)))
                (when (and used (not (eq used coding)))
                  (setf (fastrevert--process-decoding process) used))))))
          (t
           (fastrevert--process-decode-and-deliver
            process fastrevert--output-stdout
            (with-temp-buffer
              (set-buffer-multibyte nil)
              (let ((file-name-handler-alist nil))
                (insert-file-contents-literally (fastrevert--memfd-file-name fd) nil from to))
              (buffer-string))
            t)))))

(defun fastrevert--deliver-later (process)
  "Count output of PROCESS that came while its filter is running, further up.
The output waits in the engine until the filter returns, as stock
never runs a process's filter inside itself; a wait for output in the
filter sees that it has come."
  (fastrevert--process-count-output process))

(defun fastrevert--deliver-end (process code how)
  "Report the end of PROCESS, which ended as HOW with CODE, after all its output.
HOW is `fastrevert--exit-exited' or one of its siblings, which says what
CODE is.  A child whose status is lost ends as one that exited with
code -1, as in Emacs.  Runs with quitting inhibited."
  (let ((inhibit-quit t))
    (fastrevert--process-flush-tails process)
    (setf (fastrevert--process-status process)
          (if (fastrevert--exit-signaled-p how) 'signal 'exit)
          (fastrevert--process-exit-status process) code
          (fastrevert--process-core-dumped process) (equal how fastrevert--exit-core-dumped))
    (fastrevert--process-finish process)))

(defun fastrevert--deliver-failure (process reason)
  "Report that the engine gave PROCESS up, for REASON, and killed it.
Its output could not all be read, so it ends here, as killed.  Runs
with quitting inhibited."
  (let ((inhibit-quit t))
    (fastrevert--process-flush-tails process)
    (message "error in process %s: %s" (fastrevert--process-name process) reason)
    (fastrevert--process-kill process)))

(defun fastrevert--process-flush-tails (process)
  "Deliver the bytes PROCESS held back for an unfinished character."
  (dolist (cell (fastrevert--process-tails process))
    (when (cdr cell)
      (let ((bytes (cdr cell)))
        (setcdr cell nil)
        (fastrevert--process-decode-and-deliver process (car cell) bytes t)))))

(defun fastrevert--process-status-message (process)
  "Return the sentinel event string for PROCESS's status, as Emacs words it."
  (let ((code (fastrevert--process-exit-status process))
        (core (if (fastrevert--process-core-dumped process) " (core dumped)\n" "\n")))
    (pcase (fastrevert--process-status process)
      ('exit (if (eql code 0)
                 "finished\n"
               (format "exited abnormally with code %d%s" code core)))
      ('signal
       (let ((name (fastrevert--mod-strsignal code)))
         (if (not name)
             (concat "unknown" core)
           (let ((text (decode-coding-string name (or locale-coding-system 'utf-8))))
             (concat (downcase (substring text 0 1)) (substring text 1) core)))))
      (_ "run\n"))))

(defun fastrevert--process-finish (process)
  "Report PROCESS's end to its sentinel and forget it."
  (fastrevert--process-forget process)
  (let ((event (fastrevert--process-status-message process))
        (sentinel (fastrevert--process-sentinel process)))
    (if sentinel
        (fastrevert--process-call "sentinel" sentinel process event)
      (setq fastrevert--handed t)
      (fastrevert--process-default-sentinel process event))))

(defun fastrevert--process-default-sentinel (process event)
  "Insert EVENT about PROCESS into its buffer, as the stock default sentinel does."
  (let ((buffer (fastrevert--process-buffer process))
        (mark (fastrevert--process-mark process)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (let ((opoint (point))
              (old-read-only buffer-read-only)
              before)
          (goto-char (if (marker-buffer mark) mark (point-max)))
          (setq before (point))
          (setq buffer-read-only nil)
          (unwind-protect
              (insert "\nProcess " (fastrevert--process-name process) " " event)
            (setq buffer-read-only old-read-only))
          (set-marker mark (point))
          (goto-char (if (>= opoint before) (+ opoint (- (point) before)) opoint)))))))

(defun fastrevert--process-kill (process)
  "End PROCESS as killed, and tell its sentinel."
  (setf (fastrevert--process-status process) 'signal
        (fastrevert--process-exit-status process) 9)
  (fastrevert--process-finish process))

(defun fastrevert--process-engine-stopped ()
  "Report the end of every process, after the engine stopped and killed them."
  (let (processes)
    (maphash (lambda (_id process) (push process processes)) fastrevert--processes)
    (dolist (process (nreverse processes))
      (when (eq (fastrevert--process-status process) 'run)
        (fastrevert--process-kill process)))))

(add-hook 'fastrevert--engine-stopped-hook #'fastrevert--process-engine-stopped)

;;;; fastrevert-make-process

(defun fastrevert--process-output-buffer (spec)
  "Return the buffer SPEC names, creating it, or nil for nil."
  (and spec (or (get-buffer spec)
                (if (stringp spec) (get-buffer-create spec)
                  (signal 'wrong-type-argument (list 'bufferp spec))))))

(defun fastrevert--process-stderr-target (spec)
  "Return the destination of standard error for the :stderr argument SPEC.
That is a buffer (made when SPEC names none), a pipe process, whose
filter gets it as its own output, or nil."
  (if (processp spec)
      (if (eq (process-type spec) 'pipe)
          spec
        (signal 'wrong-type-argument (list 'pipe-process-p spec)))
    (fastrevert--process-output-buffer spec)))

(defun fastrevert--process-decoding-kind (coding)
  "Return how the module hands over output that CODING decodes.
`utf-8' for UTF-8 with Unix line ends and nothing done after
decoding: the module decodes well-formed pieces itself.  `raw' for
raw bytes with Unix line ends: the bytes are the text.  `lisp' for
any other: the pieces are decoded here."
  (cond ((and (eq (coding-system-type coding) 'raw-text)
              (eql (coding-system-eol-type coding) 0))
         'raw)
        ((and (eq (coding-system-type coding) 'utf-8)
              (eql (coding-system-eol-type coding) 0)
              (not (coding-system-get coding :bom))
              (not (coding-system-get coding :post-read-conversion))
              (not (coding-system-get coding :decode-translation-table)))
         'utf-8)
        (t 'lisp)))

(defun fastrevert--process-memfd-p (kind coding)
  "Return non-nil if output of decoding KIND in CODING may go through a memfd.
A range of the memfd must decode alone: the module cuts UTF-8 where a
character ends, and any cut will do for raw bytes or a single-byte
coding with Unix line ends."
  (or (memq kind '(utf-8 raw))
      (and (eq (fastrevert--split-kind coding) 'single)
           (eql (coding-system-eol-type coding) 0))))

(defun fastrevert--process-new-mark (buffer)
  "Return a new process mark at the end of BUFFER, or an unset marker."
  (let ((mark (make-marker)))
    ;; A killed buffer is accepted, as `make-process' accepts it: its
    ;; output goes nowhere.
    (when (buffer-live-p buffer)
      (set-marker mark (with-current-buffer buffer (point-max)) buffer))
    mark))

;;;###autoload
(defun fastrevert-make-process (&rest args)
  "Start a child process, its output read by fastrevert's engine.
ARGS are keywords, as for `make-process':

:name NAME       the process name (a string; made unique);
:buffer BUFFER   the buffer or buffer name output goes to, or nil;
:command COMMAND the program and its arguments, a list of strings;
:coding CODING   a coding system, or (DECODING . ENCODING);
:noquery QUERY   non-nil means do not ask about it when Emacs exits;
:stderr STDERR   a buffer or buffer name for standard error, or a
                 pipe process whose filter gets it; nil mixes
                 standard error with the output;
:filter FILTER   called as (FILTER PROCESS STRING), once per stream
                 per batch of output;
:sentinel SENTINEL called as (SENTINEL PROCESS EVENT) once, after
                 all output, with Emacs's usual EVENT strings;
:framing FRAMING nil (raw chunks), `lines' (the filter sees only
                 complete lines) or `lsp' (only complete
                 Content-Length messages);
:backlog BYTES   the most output the engine reads ahead of Emacs
                 (16 MiB when nil): past it the child waits on its
                 full pipe, as with stock Emacs, until Emacs has
                 taken some.  A line (or LSP message) longer than
                 that does not wait whole: it reaches the filter in
                 pieces, which join up to it.

Filters and sentinels run with quitting inhibited, as with stock
Emacs: a quit typed while output is delivered is taken once that
output has been, and loses none.

Without a filter, output is inserted into BUFFER at the process mark
as the default filter does.  Unframed standard output past its first
16 KiB, in UTF-8, raw text or a single-byte coding with Unix line
ends, goes through a memfd: into BUFFER with `insert-file-contents',
with no Lisp string made, and to a filter as one string per piece,
decoded in a scratch buffer.  Return
a `fastrevert-process'.  The program is found through the variable
`exec-path' and runs in `default-directory' with
`process-environment'; a missing program signals the error
`make-process' signals."
  (let* ((name (plist-get args :name))
         (command (plist-get args :command))
         (framing (plist-get args :framing))
         (filter (plist-get args :filter))
         (sentinel (plist-get args :sentinel))
         (stderr-spec (plist-get args :stderr))
         (backlog (plist-get args :backlog)))
    (unless (stringp name)
      ;; The stock primitive signals the error the running Emacs words for a
      ;; missing or wrong :name (Emacs 30 words its own), and makes no
      ;; process then.  Called with no argument at all, it does nothing.
      (apply #'make-process (if (plist-member args :name) (list :name name) '(:noquery t)))
      (signal 'wrong-type-argument (list 'stringp name)))
    (unless (consp command) (signal 'wrong-type-argument (list 'consp command)))
    (dolist (word command)
      (unless (stringp word) (signal 'wrong-type-argument (list 'stringp word))))
    (unless (memq framing '(nil lines lsp))
      (signal 'wrong-type-argument (list 'fastrevert-framing-p framing)))
    (dolist (function (list filter sentinel))
      (unless (or (null function) (functionp function))
        (signal 'wrong-type-argument (list 'functionp function))))
    (unless (or (null backlog) (natnump backlog))
      (signal 'wrong-type-argument (list 'natnump backlog)))
    (fastrevert--engine-ensure)
    (let* ((buffer (fastrevert--process-output-buffer (plist-get args :buffer)))
           (stderr-buffer (fastrevert--process-stderr-target stderr-spec))
           (program (car command))
           (dir (fastrevert--process-directory))
           (encoded-path (fastrevert--process-program program))
           (coding (fastrevert--process-coding (plist-get args :coding)
                                               (cons name (cons buffer command))))
           (encoded-args (fastrevert--process-encode-args
                          (cons 'start-process (cons name (cons buffer command)))
                          (cdr command)))
           (kind (fastrevert--process-decoding-kind (car coding)))
           (id (fastrevert--process-new-id))
           (process (fastrevert--process-start-record
                     id (fastrevert--process-unique-name name) command
                     buffer (fastrevert--process-new-mark buffer)
                     stderr-buffer (fastrevert--process-new-mark
                                    (and (bufferp stderr-buffer) stderr-buffer))
                     filter sentinel (car coding) (cdr coding)
                     (not (plist-get args :noquery)) fastrevert--engine-generation))
           (result (fastrevert--mod-process-start
                    id encoded-path (vconcat (list encoded-path) encoded-args)
                    (fastrevert--process-environment dir)
                    (fastrevert--process-encode-file dir)
                    t (cond ((or framing (not (fastrevert--process-memfd-p kind (car coding))))
                             t)
                            (filter 'memfd-filter)
                            (buffer 'memfd)
                            (t t))
                    (if stderr-buffer 'pipe t) framing
                    (max 4096 read-process-output-max)
                    process kind (and backlog (max 1 backlog)))))
      (when (eq (car-safe result) :error)
        (fastrevert--process-raise result nil))
      (setf (fastrevert--process-pid process) result)
      (puthash id process fastrevert--processes)
      (puthash (fastrevert--process-name process) process fastrevert--process-names)
      process)))

;;;; Companions

(defun fastrevert-process-live-p (process)
  "Return non-nil if PROCESS, a `fastrevert-process', is still running."
  (fastrevert--process-check process)
  (and (eq (fastrevert--process-status process) 'run)
       (eq (gethash (fastrevert--process-id process) fastrevert--processes) process)
       (eql (fastrevert--process-engine process) fastrevert--engine-generation)
       (fastrevert--mod-running-p)
       t))

(defun fastrevert-process-status (process)
  "Return the status of PROCESS: `run', `exit' or `signal'."
  (fastrevert--process-check process)
  (if (and (eq (fastrevert--process-status process) 'run)
           (not (fastrevert-process-live-p process)))
      'signal
    (fastrevert--process-status process)))

(defun fastrevert-process-name (process)
  "Return the name of PROCESS, a `fastrevert-process'."
  (fastrevert--process-check process)
  (fastrevert--process-name process))

(defun fastrevert-process-command (process)
  "Return the command that started PROCESS, a list of strings."
  (fastrevert--process-check process)
  (fastrevert--process-command process))

(defun fastrevert-process-filter (process)
  "Return the filter function of PROCESS, or nil."
  (fastrevert--process-check process)
  (fastrevert--process-filter process))

(defun fastrevert-process-sentinel (process)
  "Return the sentinel function of PROCESS, or nil."
  (fastrevert--process-check process)
  (fastrevert--process-sentinel process))

(defun fastrevert-process-exit-status (process)
  "Return the exit code of PROCESS, or the number of the signal that ended it.
Return 0 while it runs."
  (fastrevert--process-check process)
  (fastrevert--process-exit-status process))

(defun fastrevert-process-buffer (process)
  "Return the buffer that receives the output of PROCESS, or nil."
  (fastrevert--process-check process)
  (fastrevert--process-buffer process))

(defun fastrevert-process-mark (process)
  "Return the process mark of PROCESS, the position for its output."
  (fastrevert--process-check process)
  (fastrevert--process-mark process))

(defun fastrevert-process-id-of (process)
  "Return the operating system's process id of PROCESS."
  (fastrevert--process-check process)
  (fastrevert--process-pid process))

(defun fastrevert-process-query-on-exit-flag (process)
  "Return non-nil if Emacs asks before killing PROCESS at exit."
  (fastrevert--process-check process)
  (fastrevert--process-query-on-exit process))

(defun fastrevert-set-process-query-on-exit-flag (process flag)
  "Make Emacs ask before killing PROCESS at exit if FLAG is non-nil."
  (fastrevert--process-check process)
  (setf (fastrevert--process-query-on-exit process) flag))

(defvar fastrevert--not-running-says-why 'unknown
  "Whether this Emacs's error for a process that is not running says why.
Emacs 30 adds the status to \"Process NAME not running\"; earlier
versions do not.  Found out once, from a stock pipe process.")

(defun fastrevert--process-not-running (process)
  "Signal the error stock Emacs signals for sending to PROCESS, which has ended."
  (when (eq fastrevert--not-running-says-why 'unknown)
    (let ((probe (make-pipe-process :name " *fastrevert-probe*" :noquery t :buffer nil)))
      (delete-process probe)
      (setq fastrevert--not-running-says-why
            (condition-case error
                (progn (process-send-string probe "") nil)
              (error (and (stringp (cadr error))
                          (string-match-p " not running: " (cadr error))
                          t))))))
  (if fastrevert--not-running-says-why
      (error "Process %s not running: %s" (fastrevert--process-name process)
             (fastrevert--process-status-message process))
    (error "Process %s not running" (fastrevert--process-name process))))

(defun fastrevert-process-send-string (process string)
  "Send STRING to the standard input of PROCESS, encoded with its coding.
This never blocks: whatever the pipe does not take now is queued and
written as the child reads."
  (fastrevert--process-check process)
  (unless (stringp string) (signal 'wrong-type-argument (list 'stringp string)))
  (unless (fastrevert-process-live-p process)
    (fastrevert--process-not-running process))
  (fastrevert--mod-process-send
   (fastrevert--process-id process)
   (if (multibyte-string-p string)
       (encode-coding-string string (fastrevert--process-encoding process) t)
     string))
  nil)

(defun fastrevert-process-send-eof (process)
  "Close the standard input of PROCESS once all queued input is written.
Return PROCESS."
  (fastrevert--process-check process)
  (unless (fastrevert-process-live-p process)
    (fastrevert--process-not-running process))
  (fastrevert--mod-process-eof (fastrevert--process-id process))
  process)

(defun fastrevert-process-signal (process sigcode)
  "Send PROCESS the signal SIGCODE, a number or a name such as `SIGINT' or `int'.
The signal goes to the child's process group, as `kill-process' and
`interrupt-process' send it.  Return 0, or -1 when PROCESS has ended
or there is no such signal, as `signal-process' returns then."
  (fastrevert--process-check process)
  (let ((number (fastrevert--signal-number sigcode)))
    (if (or (not (fastrevert-process-live-p process))
            ;; What kill(2) refuses with EINVAL.
            (not (<= 0 number 64)))
        -1
      (fastrevert--mod-process-signal (fastrevert--process-id process) number)
      0)))

(defun fastrevert--process-kill-buffer ()
  "Send SIGHUP to the live processes that write to the current buffer.
Killing a buffer does so to its processes in stock Emacs.  Run from
`kill-buffer-hook'."
  (when (> (hash-table-count fastrevert--processes) 0)
    (let ((buffer (current-buffer))
          (hangup (fastrevert--mod-signal-number "HUP"))
          (targets nil))
      (maphash (lambda (_id process)
                 (when (eq (fastrevert--process-buffer process) buffer)
                   (push process targets)))
               fastrevert--processes)
      (dolist (process targets)
        (when (fastrevert-process-live-p process)
          (fastrevert--mod-process-signal (fastrevert--process-id process) hangup))))))

(add-hook 'kill-buffer-hook #'fastrevert--process-kill-buffer)

(defun fastrevert-delete-process (process)
  "Kill PROCESS, forget it and tell its sentinel, as `delete-process' does.
The sentinel gets \"killed\\n\" at once unless the process had already
ended; the child is reaped in the background."
  (fastrevert--process-check process)
  (let ((id (fastrevert--process-id process)))
    (when (eq (gethash id fastrevert--processes) process)
      (fastrevert--mod-process-remove id)
      (setf (fastrevert--process-status process) 'signal
            (fastrevert--process-exit-status process) 9)
      (fastrevert--process-finish process)))
  nil)

(defun fastrevert-accept-process-output (&optional process seconds millisec just-this-one)
  "Wait for output from PROCESS, as `accept-process-output' does.
PROCESS is a `fastrevert-process', or nil for output from any
fastrevert process.  SECONDS and MILLISEC bound the wait; without
them, wait until output arrives (or PROCESS has ended).
JUST-THIS-ONE non-nil runs no other process filters meanwhile, and
an integer runs no timers either.  Return non-nil if output (or
PROCESS's end) was handled.

The wait is native: the engine's results are taken as soon as they
are ready, not when Emacs's event loop next reads the engine's wake
pipe.  It happens in slices of `fastrevert--wait-slice' seconds; at
least that often, Emacs runs its timers and other processes' filters
as JUST-THIS-ONE allows, however busy the output.  Quitting
interrupts the wait."
  (when process (fastrevert--process-check process))
  (fastrevert--engine-ensure)
  (let* ((timeout (fastrevert--process-timeout seconds millisec))
         (deadline (and timeout (+ (float-time) timeout)))
         (id (and process (fastrevert--process-id process)))
         (start (if process (fastrevert--process-outputs process)
                  fastrevert--process-output-count)))
    (if (and process (not (eq (gethash id fastrevert--processes) process)))
        ;; Its end was handled before: only results already queued are.
        (progn (fastrevert--keeping-match-data (fastrevert--drain))
               nil)
      (fastrevert--wait-for
       (lambda ()
         (or (/= start (if process (fastrevert--process-outputs process)
                         fastrevert--process-output-count))
             (and process (not (eq (gethash id fastrevert--processes) process)))))
       deadline just-this-one))))

(defun fastrevert--process-timeout (seconds millisec)
  "Return the seconds SECONDS and MILLISEC bound a wait to, or nil for none.
As `accept-process-output' reads them: SECONDS a number, MILLISEC a
fixnum; a NaN or a negative total means no wait at all."
  (when (and seconds (not (numberp seconds)))
    (signal 'wrong-type-argument (list 'numberp seconds)))
  (when (and millisec (not (fixnump millisec)))
    (signal 'wrong-type-argument (list 'fixnump millisec)))
  (when (or seconds millisec)
    (let ((total (+ (or seconds 0) (/ (or millisec 0) 1000.0))))
      (if (or (isnan (float total)) (< total 0)) 0 total))))

(defun fastrevert-process-list ()
  "Return the live fastrevert processes."
  (let (processes stale)
    (maphash (lambda (id process)
               (if (fastrevert-process-live-p process)
                   (push process processes)
                 (push id stale)))
             fastrevert--processes)
    ;; Processes an engine restart killed never report an exit.
    (dolist (id stale)
      (fastrevert--process-forget (gethash id fastrevert--processes)))
    processes))

(defun fastrevert--process-kill-emacs-query ()
  "Ask before exiting while a fastrevert process that wants a query is live.
Return non-nil to let Emacs exit, with the question stock Emacs asks."
  (let ((active (cl-some (lambda (process)
                           (and (fastrevert--process-query-on-exit process)
                                (fastrevert-process-live-p process)))
                         (fastrevert-process-list))))
    (or (not active)
        (yes-or-no-p "Active processes exist; kill them and exit anyway? "))))

(add-hook 'kill-emacs-query-functions #'fastrevert--process-kill-emacs-query)

(defun fastrevert-process-unload-function ()
  "Kill every fastrevert process, for `unload-feature' of this library.
Their sentinels are told, and nothing that runs later (a hook, a
result of the engine) calls a function of this library any more.
Return nil, so that `unload-feature' goes on to remove the rest."
  (let (processes)
    (maphash (lambda (_id process) (push process processes)) fastrevert--processes)
    (dolist (process processes)
      (fastrevert-delete-process process)))
  (remove-hook 'kill-emacs-query-functions #'fastrevert--process-kill-emacs-query)
  (remove-hook 'kill-buffer-hook #'fastrevert--process-kill-buffer)
  (remove-hook 'fastrevert--engine-stopped-hook #'fastrevert--process-engine-stopped)
  nil)

(provide 'fastrevert-process)

;;; fastrevert-process.el ends here
