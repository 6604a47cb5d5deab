;;; fastrevert-package-vc-test.el --- fastrevert installed with package-vc and use-package -*- lexical-binding: t; -*-

;;; Commentary:

;; The README's `package-vc-install' and use-package `:vc' forms, run
;; as they stand but for the repository's address, which is a local
;; clone: the checkout compiles with no warning (test/ and bench/ left
;; out by .elpaignore), loads without the module, and builds it on
;; first use.  use-package's `:vc' came with Emacs 30.

;;; Code:

(require 'fastrevert-package-helpers)

(defun fastrevert-package-vc-test--local (form url)
  "Return FORM with every string that is a repository address replaced by URL."
  (cond ((and (stringp form) (string-match-p "\\`https://" form)) url)
        ((consp form) (cons (fastrevert-package-vc-test--local (car form) url)
                            (fastrevert-package-vc-test--local (cdr form) url)))
        (t form)))

(defun fastrevert-package-vc-test--check (home result)
  "Check RESULT, from installing with package-vc in HOME and turning the mode on."
  (should (eql (car result) 0))
  (should (string-match-p "^compile-log <<\\(\\s-\\|\\^L\\)*>>$" (cdr result)))
  (should-not (string-match-p "\\_<\\(Warning\\|Error\\):" (cdr result)))
  (should (string-match-p "^module-after-install nil$" (cdr result)))
  (should (string-match-p "^compiled-outside-lisp nil$" (cdr result)))
  (should (equal (fastrevert-package-test-match "^mode t module \\(.*\\)$" result)
                 (expand-file-name (format ".emacs.d/elpa/fastrevert/lisp/fastrevert-module-%s%s"
                                           fastrevert-version module-file-suffix)
                                   home)))
  (fastrevert-package-test-check-reverted result))

(defconst fastrevert-package-vc-test--report
  '(progn
     (princ (format "compile-log <<%s>>\n"
                    (if (get-buffer "*Compile-Log*")
                        (with-current-buffer "*Compile-Log*" (buffer-string))
                      "")))
     (princ (format "module-after-install %S\n" (featurep 'fastrevert-module)))
     (let ((dir (expand-file-name "elpa/fastrevert/" user-emacs-directory)))
       (princ (format "compiled-outside-lisp %S\n"
                      (cl-remove-if (lambda (file) (string-prefix-p (concat dir "lisp/") file))
                                    (directory-files-recursively dir "\\.elc\\'"))))))
  "A form that reports how an install went.")

(ert-deftest fastrevert-package-vc-install-of-the-readme-builds-on-first-use ()
  "The README's `package-vc-install', from a local clone with :lisp-dir \"lisp\"."
  (skip-unless (>= emacs-major-version 30))
  (fastrevert-test-with-temp-dir home
    (let* ((repository (fastrevert-package-test-git-repository
                        (expand-file-name "repository/" home)))
           (install (fastrevert-package-vc-test--local
                     (fastrevert-package-test-readme-form 'package-vc-install)
                     repository))
           (result (fastrevert-package-test-emacs
                    home
                    `(progn
                       (require 'cl-lib)
                       (package-initialize)
                       ,install
                       ,fastrevert-package-vc-test--report
                       (setq fastrevert-always-compile-module t)
                       (fastrevert-mode 1)
                       (princ (format "mode %S module %s\n" fastrevert-mode
                                      fastrevert--module-loaded-file))
                       ,fastrevert-package-test-revert-form))))
      (let ((spec (cadr (cadr install))))
        (should (eq (nth 1 spec) :url))
        (should (equal (plist-get (cdr spec) :lisp-dir) "lisp")))
      (ert-info ((cdr result) :prefix "package-vc-install: ")
        (fastrevert-package-vc-test--check home result)))))

(ert-deftest fastrevert-package-vc-use-package-form-of-the-readme-builds-on-first-use ()
  "The README's use-package form with `:vc', from a local clone."
  (skip-unless (>= emacs-major-version 30))
  (fastrevert-test-with-temp-dir home
    (let* ((repository (fastrevert-package-test-git-repository
                        (expand-file-name "repository/" home)))
           (declaration (fastrevert-package-vc-test--local
                         (fastrevert-package-test-readme-form 'use-package)
                         repository))
           (result (fastrevert-package-test-emacs
                    home
                    `(progn
                       (require 'cl-lib)
                       (package-initialize)
                       (require 'use-package)
                       ;; The mode is turned on by the declaration's :config,
                       ;; after the install this reports on.
                       (advice-add 'fastrevert-mode :before
                                   (lambda (&rest _)
                                     (advice-remove 'fastrevert-mode 'fastrevert-package-vc-test)
                                     ,fastrevert-package-vc-test--report)
                                   '((name . fastrevert-package-vc-test)))
                       ,declaration
                       (princ (format "mode %S module %s\n" fastrevert-mode
                                      fastrevert--module-loaded-file))
                       ,fastrevert-package-test-revert-form))))
      (should (memq :vc declaration))
      (ert-info ((cdr result) :prefix "use-package :vc: ")
        (fastrevert-package-vc-test--check home result)))))

(provide 'fastrevert-package-vc-test)

;;; fastrevert-package-vc-test.el ends here
