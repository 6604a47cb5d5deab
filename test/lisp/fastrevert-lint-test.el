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
           (list fastrevert-test-lisp-directory)
           `(let ((native-comp-eln-load-path (cons ,dir native-comp-eln-load-path))
                  ;; What FILE requires is loaded from the sources under
                  ;; test, not from byte code an older build left there.
                  (load-prefer-newer t)
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

;;;; How the libraries stand on one another

(defun fastrevert-lint-test--requires (file)
  "Return the fastrevert features FILE requires, anywhere in its code."
  (with-temp-buffer
    (insert-file-contents file)
    (with-syntax-table emacs-lisp-mode-syntax-table
      (let ((features nil))
        (while (re-search-forward "(require '\\(fastrevert[-a-z]*\\)" nil t)
          ;; Not in a comment or a string.
          (unless (nth 8 (save-excursion (syntax-ppss (match-beginning 0))))
            (cl-pushnew (intern (match-string 1)) features)))
        features))))

(defun fastrevert-lint-test--require-cycle (graph)
  "Return a list of features that require one another in a cycle, or nil.
GRAPH maps each feature to the features it requires, as an alist."
  (let ((done nil)
        (cycle nil))
    (cl-labels ((visit (feature path)
                  (cond ((memq feature path)
                         (setq cycle (reverse (cons feature path))))
                        ((not (memq feature done))
                         (dolist (next (cdr (assq feature graph)))
                           (unless cycle (visit next (cons feature path))))
                         (push feature done)))))
      (dolist (entry graph)
        (unless cycle (visit (car entry) nil))))
    cycle))

(ert-deftest fastrevert-lint-libraries-require-one-another-without-a-cycle ()
  "Each library requires only those it stands on: no chain of requires loops."
  (let ((graph (mapcar (lambda (file)
                         (cons (intern (file-name-base file))
                               (fastrevert-lint-test--requires file)))
                       (directory-files (expand-file-name "lisp/" fastrevert-test-root)
                                        t "\\.el\\'"))))
    ;; The check itself finds a loop where there is one.
    (should (equal (fastrevert-lint-test--require-cycle '((a b) (b c) (c a)))
                   '(a b c a)))
    (should-not (fastrevert-lint-test--require-cycle '((a b c) (b c) (c))))
    ;; The front stands on the rest.
    (should (memq 'fastrevert-engine (cdr (assq 'fastrevert graph))))
    (should-not (fastrevert-lint-test--require-cycle graph))))

(ert-deftest fastrevert-lint-no-library-is-longer-than-900-lines ()
  "A library longer than that holds more than one concept; it is split."
  (dolist (file (directory-files (expand-file-name "lisp/" fastrevert-test-root) t "\\.el\\'"))
    (with-temp-buffer
      (insert-file-contents file)
      (ert-info ((format "%s" file))
        (should (<= (count-lines (point-min) (point-max)) 900))))))

(provide 'fastrevert-lint-test)

;;; fastrevert-lint-test.el ends here
