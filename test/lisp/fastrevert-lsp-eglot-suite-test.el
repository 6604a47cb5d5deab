;;; fastrevert-lsp-eglot-suite-test.el --- Emacs's own eglot tests on the engine -*- lexical-binding: t; -*-

;;; Commentary:

;; Emacs's own test/lisp/progmodes/eglot-tests.el, taken at test time from
;; the Debian source package of the Emacs that runs here
;; (test/eglot-tests-source.sh), runs twice in batch Emacsen: stock, and
;; with `fastrevert-lsp-mode' on.  Every test that passes stock must pass
;; with the mode on, and the mode must have carried the servers the tests
;; start (clangd, as Debian installs it).  Emacs 30 and later only: there
;; eglot is part of Emacs, and its tests come with Emacs's source.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'ert)

(defconst fastrevert-lsp-eglot-suite-test--source-script
  (expand-file-name "../eglot-tests-source.sh"
                    (file-name-directory (or load-file-name buffer-file-name)))
  "The script that fetches Emacs's eglot-tests.el from Debian's source package.")

(defun fastrevert-lsp-eglot-suite-test--tests-file ()
  "Return the file name of Emacs's eglot-tests.el, fetched if need be."
  (let ((cache (expand-file-name "fastrevert"
                                 (or (getenv "XDG_CACHE_HOME") (expand-file-name "~/.cache")))))
    (with-temp-buffer
      (let ((code (call-process "sh" nil t nil fastrevert-lsp-eglot-suite-test--source-script
                                cache)))
        (unless (eql code 0)
          (error "Emacs's eglot-tests.el could not be had: %s" (buffer-string)))
        (string-trim (car (last (split-string (buffer-string) "\n" t))))))))

(defun fastrevert-lsp-eglot-suite-test--run (tests-file carried)
  "Run the eglot suite of TESTS-FILE in a batch Emacs; return the results.
With CARRIED, `fastrevert-lsp-mode' is on there.  The value is a plist:
:results, an alist of (TEST . RESULT-TYPE), and :carried, how many
servers the mode carried."
  (let ((out (make-temp-file "fastrevert-eglot-suite" nil ".el")))
    (unwind-protect
        (let ((run (fastrevert-test-batch-emacs
                    (list fastrevert-test-lisp-directory)
                    `(progn
                       (require 'ert)
                       (require 'fastrevert-lsp)
                       (when ,carried (fastrevert-lsp-mode 1))
                       (load ,tests-file nil t)
                       (ert-run-tests-batch "^eglot-test-")
                       (with-temp-file ,out
                         (prin1 (list :results
                                      (mapcar (lambda (test)
                                                (cons (ert-test-name test)
                                                      (type-of (ert-test-most-recent-result test))))
                                              (ert-select-tests "^eglot-test-" t))
                                      :carried fastrevert-lsp--started)
                                (current-buffer)))))))
          (with-temp-buffer
            (insert-file-contents out)
            (when (zerop (buffer-size))
              (error "The eglot suite did not finish (exit %s): %s" (car run)
                     (cdr run)))
            (read (current-buffer))))
      (delete-file out))))

(ert-deftest fastrevert-lsp-eglot-suite-passes-with-the-mode-what-it-passes-stock ()
  "Every test of Emacs's eglot-tests.el that passes stock passes carried."
  (skip-unless (>= emacs-major-version 30))
  (should (executable-find "clangd"))
  (let* ((tests-file (fastrevert-lsp-eglot-suite-test--tests-file))
         (stock (fastrevert-lsp-eglot-suite-test--run tests-file nil))
         (carried (fastrevert-lsp-eglot-suite-test--run tests-file t))
         (passed-stock (cl-loop for (test . result) in (plist-get stock :results)
                                when (eq result 'ert-test-passed) collect test))
         (carried-results (plist-get carried :results)))
    ;; The clangd tests ran stock, rather than being skipped.
    (should (memq 'eglot-test-basic-completions passed-stock))
    (should (memq 'eglot-test-rename-a-symbol passed-stock))
    (should (> (length passed-stock) 20))
    (should (zerop (plist-get stock :carried)))
    ;; With the mode on, the servers ran on the engine.
    (should (>= (plist-get carried :carried) 10))
    (should (equal (cl-loop for test in passed-stock
                            unless (eq (alist-get test carried-results) 'ert-test-passed)
                            collect (cons test (alist-get test carried-results)))
                   nil))))

(provide 'fastrevert-lsp-eglot-suite-test)

;;; fastrevert-lsp-eglot-suite-test.el ends here
