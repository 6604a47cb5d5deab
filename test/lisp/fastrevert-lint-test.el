;;; fastrevert-lint-test.el --- The Lisp compiles cleanly and passes checkdoc -*- lexical-binding: t; -*-

;;; Commentary:

;; Every Lisp file of the package and the benchmarks byte-compiles with
;; no warning and passes `checkdoc'.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'bytecomp)
(require 'checkdoc)

(defun fastrevert-lint-test--files ()
  "Return the Lisp files that must compile cleanly and pass checkdoc."
  (append (directory-files (expand-file-name "lisp/" fastrevert-test-root) t "\\.el\\'")
          (directory-files (expand-file-name "bench/" fastrevert-test-root) t "\\.el\\'")))

(ert-deftest fastrevert-lint-byte-compiles-without-warnings ()
  (dolist (file (fastrevert-lint-test--files))
    (fastrevert-test-with-temp-dir dir
      (let* ((byte-compile-error-on-warn t)
             (byte-compile-dest-file-function
              (lambda (source) (expand-file-name (concat (file-name-nondirectory source) "c") dir)))
             (load-path (append (list fastrevert-test-lisp-directory
                                      (expand-file-name "bench/" fastrevert-test-root))
                                load-path)))
        (ert-info ((format "Compiling %s" file))
          (should (byte-compile-file file)))))))

(defun fastrevert-lint-test--native-compile-log (file dir)
  "Compile FILE natively in a new Emacs, writing into DIR; return its log.
The new Emacs has loaded nothing of fastrevert, as the Emacs that
compiles a package in the background has not.  The value is the text
the compiler logged (its warnings and errors), or a description of how
the compilation failed."
  (let* ((report-file (expand-file-name "report.eld" dir))
         (result
          (fastrevert-test-batch-emacs
           (list (expand-file-name "lisp/" fastrevert-test-root)
                 (file-name-directory (locate-library "fastrevert-module")))
           `(let ((native-comp-eln-load-path (cons ,dir native-comp-eln-load-path))
                  (logs nil))
              (require 'subr-x)
              (let ((eln (native-compile ,file)))
                (dolist (name '("*Compile-Log*" "*Warnings*"))
                  (when (get-buffer name)
                    (with-current-buffer name
                      (push (string-trim (buffer-string)) logs))))
                (with-temp-file ,report-file
                  (prin1 (list (and eln (file-exists-p eln))
                               (string-join (delete "" logs) "\n"))
                         (current-buffer)))))))
         (report (and (file-exists-p report-file)
                      (with-temp-buffer
                        (insert-file-contents report-file)
                        (read (current-buffer))))))
    (cond ((not report) (format "The compiling Emacs failed (%s):\n%s" (car result) (cdr result)))
          ((not (car report)) (format "No native code was written:\n%s" (cdr result)))
          (t (cadr report)))))

(ert-deftest fastrevert-lint-native-compiles-without-warnings-in-a-fresh-emacs ()
  "Each Lisp file compiles natively, in an Emacs of its own, with nothing logged."
  (unless (native-comp-available-p)
    (ert-skip "This Emacs has no native compilation, so there is nothing to check"))
  (dolist (file (directory-files (expand-file-name "lisp/" fastrevert-test-root) t "\\.el\\'"))
    (fastrevert-test-with-temp-dir eln-dir
      (ert-info ((format "Compiling %s natively" file))
        (should (equal (fastrevert-lint-test--native-compile-log file eln-dir) ""))))))

(ert-deftest fastrevert-lint-passes-checkdoc ()
  (dolist (file (fastrevert-lint-test--files))
    (let* ((complaints nil)
           (checkdoc-create-error-function
            (lambda (text start _end &optional _unfixable)
              (push (format "%s:%d: %s" (file-name-nondirectory file)
                            (line-number-at-pos start) text)
                    complaints)
              nil)))
      (checkdoc-file file)
      (should (equal complaints nil)))))

(provide 'fastrevert-lint-test)

;;; fastrevert-lint-test.el ends here
