;;; fastrevert-package-helpers.el --- Installing fastrevert as users do, for tests -*- lexical-binding: t; -*-

;;; Commentary:

;; The package tests install fastrevert into a home folder of their own
;; (a fresh `package-user-dir' and `user-emacs-directory', no package
;; archive), in Emacsen of their own, and build the module there as a
;; user's Emacs would.
;;
;; Those builds are real, and each is a minute of compiling.  When
;; ccache is installed, they go through it, with a cache shared by the
;; package tests of one test run (FASTREVERT_TEST_CCACHE_DIR): each
;; layout builds in a folder beside its sources, so the same sources
;; compile with the same relative names wherever a layout put them,
;; and only the first build of a run compiles everything.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'fastrevert-engine)
(require 'subr-x)

(defconst fastrevert-package-test-source-entries
  '("lisp" "CMakeLists.txt" "cmake" "module" "Makefile" "README.md" "recipes"
    ".elpaignore" ".gitignore" "test" "bench")
  "The entries of the source tree that a copy of the repository holds.")

(defun fastrevert-package-test-copy-sources (dir &optional version)
  "Copy the source tree into DIR, without build products; return DIR.
With VERSION, the copy is of that version: its \"Version:\" header and
`fastrevert-version' say so."
  (dolist (entry fastrevert-package-test-source-entries)
    (let ((from (expand-file-name entry fastrevert-test-root))
          (to (expand-file-name entry dir)))
      (if (file-directory-p from)
          (copy-directory from to nil t t)
        (copy-file from to))))
  (dolist (built (directory-files-recursively
                  dir "\\.\\(elc\\|so\\|dylib\\|eln\\)\\'\\|-autoloads\\.el\\'"))
    (delete-file built))
  (when version
    (dolist (file (directory-files (expand-file-name "lisp" dir) t "\\.el\\'"))
      (with-temp-file file
        (insert-file-contents file)
        (goto-char (point-min))
        (while (re-search-forward
                (concat "^;; Version: " (regexp-quote fastrevert-version) "$\\|"
                        "(defconst fastrevert-version \"" (regexp-quote fastrevert-version) "\"")
                nil t)
          (replace-match (if (string-prefix-p ";;" (match-string 0))
                             (concat ";; Version: " version)
                           (concat "(defconst fastrevert-version \"" version "\""))
                         t t)))))
  dir)

(defun fastrevert-package-test-make-package (source out)
  "Run `make package' in SOURCE, writing the tarball into OUT; return its name."
  (with-temp-buffer
    (let ((code (call-process "make" nil t nil "-C" source "--no-print-directory" "package"
                              (concat "BUILD=" (expand-file-name "package-build" out))
                              (concat "PACKAGE_OUT=" out)
                              (concat "EMACS=" (expand-file-name invocation-name
                                                                 invocation-directory)))))
      (unless (eq code 0)
        (error "make package failed (%s):\n%s" code (buffer-string)))
      (car (directory-files out t "\\`fastrevert-.*\\.tar\\'")))))

(defun fastrevert-package-test-git-repository (dir &optional version)
  "Make DIR a Git repository of the source tree, as VERSION if given; return DIR."
  (fastrevert-package-test-copy-sources dir version)
  (let ((default-directory dir))
    (dolist (args '(("init" "-q") ("add" "-A")
                    ("-c" "user.name=fastrevert" "-c" "user.email=fastrevert@localhost"
                     "commit" "-q" "-m" "fastrevert")))
      (with-temp-buffer
        (unless (eq 0 (apply #'call-process "git" nil t nil args))
          (error "git %s failed:\n%s" (string-join args " ") (buffer-string))))))
  dir)

(defun fastrevert-package-test-environment (home)
  "Return the `process-environment' for an Emacs whose home is HOME."
  (append (list (concat "HOME=" home))
          ;; CMake takes its compiler launcher from the environment, so
          ;; that an Emacs run with -Q builds through the cache too.
          (let ((cache (getenv "FASTREVERT_TEST_CCACHE_DIR")))
            (and cache (executable-find "ccache")
                 (list "CMAKE_CXX_COMPILER_LAUNCHER=ccache" "CMAKE_C_COMPILER_LAUNCHER=ccache"
                       (concat "CCACHE_DIR=" cache)
                       (concat "CCACHE_BASEDIR="
                               (directory-file-name (file-truename temporary-file-directory)))
                       "CCACHE_NOHASHDIR=1"
                       "CCACHE_SLOPPINESS=include_file_mtime,include_file_ctime")))
          (fastrevert-test-emacs-environment)))

(defun fastrevert-package-test-emacs (home form &optional load-dirs)
  "Run FORM in a batch Emacs whose home is HOME; return (EXIT-CODE . OUTPUT).
The Emacs has a fresh `package-user-dir' (HOME/.emacs.d/elpa, as
package.el has it), no package archive, and LOAD-DIRS on `load-path'."
  (make-directory (expand-file-name ".emacs.d" home) t)
  (with-temp-buffer
    (let* ((process-environment (fastrevert-package-test-environment home))
           (default-directory home)
           (setup `(progn
                     (require 'package)
                     (setq package-archives nil
                           package-user-dir (expand-file-name "elpa" user-emacs-directory)
                           custom-file (expand-file-name "custom.el" user-emacs-directory))))
           (code (apply #'call-process
                        (expand-file-name invocation-name invocation-directory)
                        nil t nil "-Q" "--batch"
                        (append (mapcan (lambda (dir) (list "-L" dir)) load-dirs)
                                (list "--eval" (prin1-to-string setup)
                                      "--eval" (prin1-to-string form))))))
      (cons code (buffer-string)))))

(defun fastrevert-package-test-readme-forms ()
  "Return every Lisp form in the README's elisp code blocks."
  (with-temp-buffer
    (insert-file-contents (expand-file-name "README.md" fastrevert-test-root))
    (let ((forms nil))
      (while (re-search-forward "^```elisp\n" nil t)
        (let ((end (save-excursion (re-search-forward "^```$") (match-beginning 0))))
          (condition-case nil
              (while (< (progn (forward-comment (buffer-size)) (point)) end)
                (push (read (current-buffer)) forms))
            (end-of-file nil))))
      (nreverse forms))))

(defun fastrevert-package-test-readme-form (head)
  "Return the README's first Lisp form whose car is HEAD."
  (or (assq head (fastrevert-package-test-readme-forms))
      (error "The README has no (%s ...) form" head)))

(defun fastrevert-package-test-match (regexp result)
  "Return the first group of REGEXP in the output of RESULT, or nil."
  (and (string-match regexp (cdr result)) (match-string 1 (cdr result))))

(defconst fastrevert-package-test-revert-form
  '(let* ((file (make-temp-file "fastrevert-package-" nil ".txt" "before\n"))
          (buffer (progn (global-auto-revert-mode 1) (find-file-noselect file)))
          (deadline (+ (float-time) 30)))
     (call-process "sh" nil nil nil "-c" (format "printf 'after\\n' > %s"
                                                 (shell-quote-argument file)))
     (while (and (not (equal (with-current-buffer buffer (buffer-string)) "after\n"))
                 (< (float-time) deadline))
       (accept-process-output nil 0.05))
     (princ (format "reverted %S fastrevert-reverts %S\n"
                    (equal (with-current-buffer buffer (buffer-string)) "after\n")
                    (plist-get (fastrevert-stats) :reverts)))
     (delete-file file))
  "A form that changes a visited file on disk and reports whether it was reverted.
It prints \"reverted t\" when the buffer followed, and how many
reverts fastrevert made.")

(defun fastrevert-package-test-check-reverted (result)
  "Assert that RESULT reports a file reverted by fastrevert."
  (should (string-match-p "^reverted t fastrevert-reverts [1-9]" (cdr result))))

(provide 'fastrevert-package-helpers)

;;; fastrevert-package-helpers.el ends here
