;;; fastrevert-test-helpers.el --- Shared helpers for fastrevert's ERT tests -*- lexical-binding: t; -*-

;;; Commentary:

;; Waiting on conditions with deadlines, and temporary files.

;;; Code:

(require 'ert)
(require 'cl-lib)

(defconst fastrevert-test-root
  (expand-file-name "../../" (file-name-directory (or load-file-name buffer-file-name)))
  "The root of the fastrevert source tree.")

(defun fastrevert-test-wait-for (predicate &optional timeout)
  "Process events until PREDICATE returns non-nil or TIMEOUT seconds pass.
Return PREDICATE's value, or nil on timeout.  TIMEOUT defaults to 10."
  (let ((deadline (+ (float-time) (or timeout 10)))
        (value nil))
    (while (and (not (setq value (funcall predicate)))
                (< (float-time) deadline))
      (accept-process-output nil 0.02))
    value))

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
    (let ((code (apply #'call-process
                       (expand-file-name invocation-name invocation-directory)
                       nil t nil "-Q" "--batch"
                       (append (mapcan (lambda (dir) (list "-L" dir)) load-dirs)
                               (list "--eval" (prin1-to-string form))))))
      (cons code (buffer-string)))))

(provide 'fastrevert-test-helpers)

;;; fastrevert-test-helpers.el ends here
