;;; fastrevert-package-test.el --- fastrevert installed from its package tarball -*- lexical-binding: t; -*-

;;; Commentary:

;; `make package' writes the tarball that `package-install-file' takes,
;; holding what the MELPA recipe names.  Installed from it, with no
;; archive and a fresh home, the Lisp byte-compiles without a word,
;; loads without the module, and builds the module the first time
;; `fastrevert-mode' is turned on; an upgrade builds the new version's
;; module and asks an Emacs running the old one to restart.

;;; Code:

(require 'fastrevert-package-helpers)
(require 'tar-mode)

;;;; What the package holds

(defun fastrevert-package-test--tar-files (tar)
  "Return the files of TAR, without the top folder, sorted."
  (with-temp-buffer
    (call-process "tar" nil t nil "-tf" tar)
    (sort (mapcar (lambda (name) (replace-regexp-in-string "\\`[^/]*/" "" name))
                  (cl-remove-if (lambda (name) (string-suffix-p "/" name))
                                (split-string (buffer-string) "\n" t)))
          #'string<)))

(defun fastrevert-package-test--recipe ()
  "Return the MELPA recipe in recipes/fastrevert."
  (with-temp-buffer
    (insert-file-contents (expand-file-name "recipes/fastrevert" fastrevert-test-root))
    (read (current-buffer))))

(defun fastrevert-package-test--recipe-files (recipe)
  "Return the files that RECIPE's :files put in a package, sorted.
They are laid out as MELPA does: a glob puts each file it matches
at the package's top; a folder keeps its path and everything under it."
  (let ((default-directory fastrevert-test-root)
        (files nil))
    (dolist (spec (plist-get (cdr recipe) :files))
      (dolist (match (file-expand-wildcards spec))
        (if (file-directory-p match)
            (dolist (file (directory-files-recursively match ""))
              (push (file-relative-name file fastrevert-test-root) files))
          (push (if (string-match-p "[*?]" spec) (file-name-nondirectory match) match)
                files))))
    (sort files #'string<)))

(ert-deftest fastrevert-package-tarball-holds-what-the-melpa-recipe-names ()
  "The tarball, the recipe in the repository and the README name one set of files."
  (fastrevert-test-with-temp-dir dir
    (let* ((tar (fastrevert-package-test-make-package fastrevert-test-root dir))
           (files (fastrevert-package-test--tar-files tar))
           (recipe (fastrevert-package-test--recipe)))
      (should (equal (file-name-nondirectory tar) (format "fastrevert-%s.tar" fastrevert-version)))
      ;; The tarball: what the recipe names, and the description package.el wants.
      (should (equal files (sort (cons "fastrevert-pkg.el"
                                       (fastrevert-package-test--recipe-files recipe))
                                 #'string<)))
      (should (member "fastrevert.el" files))
      (should (member "CMakeLists.txt" files))
      (should (member "module/glue/module.cpp" files))
      (should (member "cmake/FastrevertPlatform.cmake" files))
      (should-not (cl-find-if (lambda (file) (string-match-p "\\`\\(test\\|bench\\)/" file))
                              files))
      ;; The README shows the same recipe.
      (should (member recipe (fastrevert-package-test-readme-forms)))
      ;; package-vc compiles what it checks out, but for these.
      (should (equal (with-temp-buffer
                       (insert-file-contents (expand-file-name ".elpaignore" fastrevert-test-root))
                       (split-string (buffer-string) "\n" t))
                     '("test" "bench" "build*"
                       ;; What package-vc writes at the top of a checkout, which
                       ;; Emacs 30.1 would compile, warning of its binding.
                       "fastrevert-autoloads.el" "fastrevert-pkg.el"))))))

(defun fastrevert-package-test--makefile-list (variable)
  "Return the words the Makefile gives VARIABLE."
  (with-temp-buffer
    (insert-file-contents (expand-file-name "Makefile" fastrevert-test-root))
    (goto-char (point-min))
    (re-search-forward (concat "^" (regexp-quote variable) " *:= *\\(\\(?:.*\\\\\n\\)*.*\\)$"))
    (split-string (replace-regexp-in-string "\\\\\n" " " (match-string 1)) "[ \t]+" t)))

(ert-deftest fastrevert-package-build-names-the-packages-of-make-deps ()
  "What the build tells a user to install is what `make deps' installs there."
  (require 'fastrevert-compile)
  (pcase-dolist (`(,manager ,command . ,packages) fastrevert-module--system-packages)
    (ert-info ((symbol-name manager) :prefix "package manager: ")
      (let ((listed (fastrevert-package-test--makefile-list
                     (if (eq manager 'apt-get) "DEPS_PACKAGES" (format "DEPS_%s" manager)))))
        (should listed)
        (dolist (package packages)
          (should (member (cdr package) listed))))
      (unless (eq manager 'apt-get)
        (should (equal (fastrevert-package-test--makefile-list (format "INSTALL_%s" manager))
                       (append (split-string command) (and (memq manager '(pkg dnf)) '("-y"))
                               (and (eq manager 'pacman) '("--noconfirm"))))))))
  ;; And it names every need, on every system but where the compiler comes
  ;; with the system.
  (pcase-dolist (`(,manager ,_command . ,packages) fastrevert-module--system-packages)
    (should (equal (sort (mapcar #'car packages) #'string<)
                   (sort (cl-remove-if (lambda (need)
                                         (and (eq need 'c++) (memq manager '(brew port pkg))))
                                       (mapcar #'car fastrevert-module--need-names))
                         #'string<)))))

;;;; Installing it

(defconst fastrevert-package-test--install-form
  '(let ((tar (getenv "FASTREVERT_TEST_TAR")))
     (package-initialize)
     (package-install-file tar)
     (princ (format "installed %S\n" (package-installed-p 'fastrevert)))
     (princ (format "compile-log <<%s>>\n"
                    (if (get-buffer "*Compile-Log*")
                        (with-current-buffer "*Compile-Log*" (buffer-string))
                      "")))
     (let* ((dir (package-desc-dir (cadr (assq 'fastrevert package-alist))))
            (sources (directory-files dir nil "\\`fastrevert.*\\.el\\'")))
       (princ (format "uncompiled %S\n"
                      (cl-remove-if (lambda (file)
                                      (or (string-match-p "-\\(pkg\\|autoloads\\)\\.el\\'" file)
                                          (file-exists-p
                                           (expand-file-name (concat file "c") dir))))
                                    sources)))))
  "A form that installs the tarball named by FASTREVERT_TEST_TAR and reports.")

(defun fastrevert-package-test--install (home tar)
  "Install TAR with `package-install-file' in HOME; check it compiled cleanly."
  (let* ((process-environment (cons (concat "FASTREVERT_TEST_TAR=" tar) process-environment))
         (result (fastrevert-package-test-emacs
                  home `(progn (require 'cl-lib) ,fastrevert-package-test--install-form))))
    (ert-info ((cdr result) :prefix "install: ")
      (should (eql (car result) 0))
      (should (string-match-p "^installed t$" (cdr result)))
      (should (string-match-p "^compile-log <<\\(\\s-\\|\\^L\\)*>>$" (cdr result)))
      (should-not (string-match-p "\\_<\\(Warning\\|Error\\):" (cdr result)))
      (should (string-match-p "^uncompiled nil$" (cdr result))))))

(ert-deftest fastrevert-package-install-file-compiles-cleanly-and-builds-on-first-use ()
  "The tarball installs with no warning, loads without the module, and builds it."
  (fastrevert-test-with-temp-dir home
    (let ((tar (fastrevert-package-test-make-package fastrevert-test-root home)))
      (fastrevert-package-test--install home tar)
      (let ((result (fastrevert-package-test-emacs
                     home
                     `(progn
                        (package-initialize)
                        (require 'fastrevert)
                        (princ (format "module-after-require %S\n" (featurep 'fastrevert-module)))
                        (setq fastrevert-always-compile-module t
                              ;; As in an interactive Emacs: the build runs while
                              ;; Emacs goes on, and its end turns the mode on.
                              fastrevert--build-in-background t)
                        (fastrevert-mode 1)
                        (princ (format "mode-at-once %S\n" fastrevert-mode))
                        (let ((deadline (+ (float-time) 1200)))
                          (while (and (not fastrevert-mode) (< (float-time) deadline)
                                      (fastrevert-module--build-running-p))
                            (accept-process-output nil 0.1)))
                        (princ (format "mode %S module %s\n" fastrevert-mode
                                       fastrevert--module-loaded-file))
                        ,fastrevert-package-test-revert-form))))
        (ert-info ((cdr result) :prefix "first use: ")
          (should (eql (car result) 0))
          (should (string-match-p "^module-after-require nil$" (cdr result)))
          (should (string-match-p "^mode-at-once nil$" (cdr result)))
          (should (equal (fastrevert-package-test-match "^mode t module \\(.*\\)$" result)
                         (expand-file-name
                          (format ".emacs.d/elpa/fastrevert-%s/fastrevert-module-%s%s"
                                  fastrevert-version fastrevert-version module-file-suffix)
                          home)))
          (fastrevert-package-test-check-reverted result))))))

;;;; Upgrading it

(defun fastrevert-package-test--next-version ()
  "Return the version after `fastrevert-version'."
  (let ((parts (version-to-list fastrevert-version)))
    (mapconcat #'number-to-string
               (append (butlast parts) (list (1+ (car (last parts)))))
               ".")))

(ert-deftest fastrevert-package-upgrade-builds-the-new-module-and-asks-for-a-restart ()
  "Installing X+1 over a built X: a new Emacs builds and loads X+1's module,
and an Emacs that runs X's module is told to restart."
  (fastrevert-test-with-temp-dir home
    (let* ((next (fastrevert-package-test--next-version))
           (tar (fastrevert-package-test-make-package fastrevert-test-root
                                                      (expand-file-name "this/" home)))
           (next-tar (fastrevert-package-test-make-package
                      (fastrevert-package-test-copy-sources (expand-file-name "next/" home) next)
                      (expand-file-name "next-tar/" home)))
           (mode-on '(progn (setq fastrevert-always-compile-module t)
                            (fastrevert-mode 1)
                            (princ (format "mode %S version %S\n" fastrevert-mode
                                           (fastrevert--mod-version))))))
      (fastrevert-package-test--install home tar)
      (let ((result (fastrevert-package-test-emacs
                     home `(progn (package-initialize) ,mode-on))))
        (ert-info ((cdr result) :prefix "version X: ")
          (should (eql (car result) 0))
          (should (string-match-p (format "^mode t version %S$" fastrevert-version)
                                  (cdr result)))))
      ;; An Emacs running X installs X+1: package.el loads the new Lisp
      ;; over the old, which cannot unload X's module.
      (let* ((process-environment (cons (concat "FASTREVERT_TEST_TAR=" next-tar)
                                        process-environment))
             (result (fastrevert-package-test-emacs
                      home
                      `(progn
                         (package-initialize)
                         ,mode-on
                         (package-install-file (getenv "FASTREVERT_TEST_TAR"))
                         (princ (format "lisp %S\n" fastrevert-version))
                         (fastrevert-mode -1)
                         (condition-case err (fastrevert-mode 1)
                           (error (princ (format "error %S %s\n" (car err)
                                                 (error-message-string err)))))
                         (princ (format "mode-after %S\n" fastrevert-mode))))))
        (ert-info ((cdr result) :prefix "X running, X+1 installed: ")
          (should (eql (car result) 0))
          (should (string-match-p (format "^lisp %S$" next) (cdr result)))
          ;; Told at once, as the new Lisp loads...
          (should (string-match-p
                   (format "fastrevert %s is loaded, but this Emacs runs the module of %s.*restart Emacs"
                           (regexp-quote next) (regexp-quote fastrevert-version))
                   (cdr result)))
          ;; ...and whenever the module is asked for.
          (should (string-match-p "^error user-error This Emacs has loaded the module of .*restart Emacs"
                                  (cdr result)))
          (should (string-match-p "^mode-after nil$" (cdr result)))))
      ;; A new Emacs activates X+1, and builds and loads its module.
      (let ((result (fastrevert-package-test-emacs
                     home `(progn (package-initialize)
                                  ,mode-on
                                  (princ (format "module %s\n" fastrevert--module-loaded-file))
                                  ,fastrevert-package-test-revert-form))))
        (ert-info ((cdr result) :prefix "version X+1: ")
          (should (eql (car result) 0))
          (should (string-match-p (format "^mode t version %S$" next) (cdr result)))
          (should (equal (fastrevert-package-test-match "^module \\(.*\\)$" result)
                         (expand-file-name
                          (format ".emacs.d/elpa/fastrevert-%s/fastrevert-module-%s%s"
                                  next next module-file-suffix)
                          home)))
          (fastrevert-package-test-check-reverted result))))))

(provide 'fastrevert-package-test)

;;; fastrevert-package-test.el ends here
