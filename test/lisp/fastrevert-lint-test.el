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
