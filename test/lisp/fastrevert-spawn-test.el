;;; fastrevert-spawn-test.el --- A child starts as stock Emacs starts it -*- lexical-binding: t; -*-

;;; Commentary:

;; Differential tests of the state a child starts in: the shell each
;; starts reports its signal mask, the signals it ignores, whether it
;; leads its own session and process group, its working directory and
;; its limit on open files (which Emacs lowers for itself, and may give
;; back to its children).  `fastrevert-call-process' must give what
;; `call-process' gives, and `fastrevert-make-process' what
;; `make-process' gives.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'fastrevert)
(require 'fastrevert-call)
(require 'fastrevert-process)

(defconst fastrevert-spawn-test--report
  (concat "set -- $(cat /proc/$$/stat); "
          "if [ \"$1\" = \"$5\" ] && [ \"$1\" = \"$6\" ]; then echo leader; else echo member; fi; "
          "pwd; ulimit -Sn; ulimit -Hn; "
          "exec grep -E '^(SigBlk|SigIgn):' /proc/self/status")
  "A shell command that reports the state its shell started in.
The signal mask is read last, by the program the shell becomes.  Read
by another process, the shell's mask would show, by a race, the one
the shell sets for itself while it waits for that process.")

(defun fastrevert-spawn-test--comparable (report)
  "Return REPORT with glibc's two internal signals left out of SigIgn.
Signals 32 and 33 lie below SIGRTMIN and no program may use them;
glibc's posix_spawn leaves them ignored in a child, which other ways
of starting one do not."
  (replace-regexp-in-string
   "^SigIgn:\t\\([0-9a-f]+\\)$"
   (lambda (line)
     (format "SigIgn:\t%016x"
             (logand (string-to-number (substring line (length "SigIgn:\t")) 16)
                     (lognot #x180000000))))
   report t t))

(defun fastrevert-spawn-test--synchronous (function)
  "Return what a shell started by FUNCTION reports of its start.
FUNCTION is `call-process' or its drop-in."
  (with-temp-buffer
    (should (eql 0 (funcall function "/bin/sh" nil t nil "-c" fastrevert-spawn-test--report)))
    (fastrevert-spawn-test--comparable (buffer-string))))

(defun fastrevert-spawn-test--asynchronous (make)
  "Return what a shell started by MAKE reports of its start.
MAKE is `make-process' or `fastrevert-make-process'; stock's gets a
pipe, as fastrevert's always does."
  (let* ((output nil)
         (done nil)
         (process (apply make :name "fastrevert-spawn-test" :noquery t
                         :command (list "/bin/sh" "-c" fastrevert-spawn-test--report)
                         :filter (lambda (_process text) (push text output))
                         :sentinel (lambda (_process _event) (setq done t))
                         (and (eq make #'make-process) '(:connection-type pipe)))))
    (ignore process)
    (should (fastrevert-test-wait-for (lambda () done) 30))
    (fastrevert-spawn-test--comparable (apply #'concat (reverse output)))))

(ert-deftest fastrevert-spawn-call-process-child-starts-as-stock-child ()
  (skip-unless (file-readable-p "/proc/self/status"))
  (fastrevert-test-with-temp-dir dir
    (let* ((default-directory dir)
           (stock (fastrevert-spawn-test--synchronous #'call-process)))
      (should (string-match-p "\\`leader\n" stock))
      (should (equal (fastrevert-spawn-test--synchronous #'fastrevert-call-process) stock)))))

(ert-deftest fastrevert-spawn-make-process-child-starts-as-stock-child ()
  (skip-unless (file-readable-p "/proc/self/status"))
  (fastrevert-test-with-temp-dir dir
    (let* ((default-directory dir)
           (stock (fastrevert-spawn-test--asynchronous #'make-process)))
      (should (string-match-p "\\`leader\n" stock))
      (should (equal (fastrevert-spawn-test--asynchronous #'fastrevert-make-process) stock)))))

(ert-deftest fastrevert-spawn-child-file-limit-is-asked-of-stock-once ()
  ;; Whatever the limit, the answer is kept: a second question starts no
  ;; child, even with `call-process' unable to start one.
  (let ((first (fastrevert--process-child-file-limit)))
    (should (or (null first) (eq first 'unlimited) (natnump first)))
    (cl-letf (((symbol-function 'call-process)
               (lambda (&rest _) (error "A second child was started"))))
      (should (equal (fastrevert--process-child-file-limit) first)))))

(ert-deftest fastrevert-spawn-child-file-limit-waits-for-the-primitive ()
  ;; While `call-process' is something else (rebound, as a benchmark binds
  ;; it to the drop-in), nothing is asked or kept.
  (let ((fastrevert--child-file-limit 'unknown)
        (called nil))
    (cl-letf (((symbol-function 'call-process) (lambda (&rest _) (setq called t) 0)))
      (should-not (fastrevert--process-child-file-limit)))
    (should-not called)
    (should (eq fastrevert--child-file-limit 'unknown))))

(provide 'fastrevert-spawn-test)

;;; fastrevert-spawn-test.el ends here
