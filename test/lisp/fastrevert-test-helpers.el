;;; fastrevert-test-helpers.el --- Shared helpers for fastrevert's ERT tests -*- lexical-binding: t; -*-

;;; Commentary:

;; Waiting on conditions with deadlines, temporary files, other Emacs
;; processes (batch, and on a terminal to type the quit key into).

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'package)

(defconst fastrevert-test-root
  (expand-file-name "../../" (file-name-directory (or load-file-name buffer-file-name)))
  "The root of the fastrevert source tree.")

(defconst fastrevert-test-lisp-directory
  (file-name-directory (or (locate-library "fastrevert") (error "fastrevert is not on load-path")))
  "The directory fastrevert is loaded from, with its built module.
That is `lisp/' in the source tree, or a build's own copy of it; an
Emacs started by a test gets this one, so it loads the same build.")

(defconst fastrevert-test-sanitizer-preload
  (let ((preload (getenv "LD_PRELOAD")))
    (and preload (string-match-p "libasan" preload) preload))
  "The sanitizer runtime preloaded into this Emacs by `make asan-emacs', or nil.
The programs the tests run do not inherit it: under the sanitizer a
shell would report, and turn into an abort, the signals the tests make
it send itself.  An Emacs a test starts gets it back with
`fastrevert-test-emacs-environment', since it loads the same module.")

(when fastrevert-test-sanitizer-preload
  (setenv "LD_PRELOAD"))

(defun fastrevert-test-require-debian-package (feature)
  "Load FEATURE, built into Emacs or from Debian's elpa-* packages.
Fail saying how to install it when it is neither."
  (unless (require feature nil t)
    (let ((package-directory-list (list "/usr/share/emacs/site-lisp/elpa"))
          (package-user-dir (expand-file-name "no-user-packages" temporary-file-directory)))
      (package-initialize)
      (unless (require feature nil t)
        (error "%s is not installed; `make deps' installs it from Debian" feature)))))

(defun fastrevert-test-emacs-environment ()
  "Return the `process-environment' for an Emacs a test starts."
  (if fastrevert-test-sanitizer-preload
      (cons (concat "LD_PRELOAD=" fastrevert-test-sanitizer-preload) process-environment)
    process-environment))

(defun fastrevert-test-wait-for (predicate &optional timeout)
  "Process events until PREDICATE returns non-nil or TIMEOUT seconds pass.
Return PREDICATE's value, or nil on timeout.  TIMEOUT defaults to 10."
  (let ((deadline (+ (float-time) (or timeout 10)))
        (value nil))
    (while (and (not (setq value (funcall predicate)))
                (< (float-time) deadline))
      (accept-process-output nil 0.02))
    value))

(defconst fastrevert-test--main-thread-schedstat
  (format "/proc/self/task/%d/schedstat" (emacs-pid))
  "Linux's account of the main thread's time on a processor, in nanoseconds.
The main thread's task has the process's own id.")

(defun fastrevert-test-main-thread-seconds ()
  "Return the processor time Emacs's main thread has used, in seconds.
Where the system does not account threads apart (no schedstat), the
whole process's time: more than the main thread's own, never less."
  (if (file-readable-p fastrevert-test--main-thread-schedstat)
      (with-temp-buffer
        (insert-file-contents-literally fastrevert-test--main-thread-schedstat)
        (/ (string-to-number (buffer-substring (point-min) (progn (skip-chars-forward "0-9")
                                                                   (point))))
           1e9))
    (float-time (get-internal-run-time))))

(defmacro fastrevert-test-with-temp-dir (var &rest body)
  "Bind VAR to a new temporary directory, run BODY, then delete it."
  (declare (indent 1))
  `(let ((,var (file-name-as-directory (make-temp-file "fastrevert-test-" t))))
     (unwind-protect (progn ,@body)
       (delete-directory ,var t))))

(defun fastrevert-test-batch-emacs (load-dirs form)
  "Run FORM in a new batch Emacs with LOAD-DIRS on `load-path'.
Return a cons (EXIT-CODE . OUTPUT)."
  (with-temp-buffer
    (let* ((process-environment (fastrevert-test-emacs-environment))
           (code (apply #'call-process
                       (expand-file-name invocation-name invocation-directory)
                       nil t nil "-Q" "--batch"
                       (append (mapcan (lambda (dir) (list "-L" dir)) load-dirs)
                               (list "--eval" (prin1-to-string form))))))
      (cons code (buffer-string)))))

(defun fastrevert-test-quit-at-terminal (form ready-file result-file)
  "Type the quit key into a terminal Emacs running FORM; return its result.
A batch Emacs cannot receive a quit key, and no timer runs while native
code waits, so a second Emacs runs FORM on a pseudo-terminal with
`fastrevert-test-lisp-directory' on its `load-path'.  Once FORM has created
READY-FILE, the quit key is typed on that terminal, exactly as a user
would.  FORM must then write one Lisp object to RESULT-FILE and kill
Emacs; that object, read back, is the value."
  (let* ((process-environment (cons "TERM=xterm" (fastrevert-test-emacs-environment)))
         (emacs (make-process
                 :name "fastrevert-tty-emacs"
                 :buffer nil
                 :connection-type 'pty
                 :noquery t
                 :command (list (expand-file-name invocation-name invocation-directory)
                                "-Q" "-nw"
                                "-L" fastrevert-test-lisp-directory
                                "--eval" (prin1-to-string form)))))
    (unwind-protect
        (progn
          (set-process-window-size emacs 24 80)
          (should (fastrevert-test-wait-for (lambda () (file-exists-p ready-file)) 30))
          (process-send-string emacs "\C-g")
          (should (fastrevert-test-wait-for (lambda () (file-exists-p result-file)) 30))
          (with-temp-buffer
            (insert-file-contents result-file)
            (read (current-buffer))))
      (delete-process emacs))))

(provide 'fastrevert-test-helpers)

;;; fastrevert-test-helpers.el ends here
