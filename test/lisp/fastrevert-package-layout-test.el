;;; fastrevert-package-layout-test.el --- The module built in every layout, or told why not -*- lexical-binding: t; -*-

;;; Commentary:

;; straight.el and elpaca link the Lisp into a folder of their own; a
;; system or Nix install leaves the Lisp read-only.  The build finds the
;; sources and puts the module where the Lisp finds it next time.  A
;; build that cannot run, or fails, says why, leaves the mode off and
;; keeps its buffer.

;;; Code:

(require 'fastrevert-package-helpers)

(defun fastrevert-package-layout-test--recipe-files (head)
  "Return the :files of the README's recipe in its (HEAD ...) form.
straight.el's form quotes its recipe; elpaca's does not."
  (let* ((argument (cadr (fastrevert-package-test-readme-form head)))
         (recipe (if (eq (car-safe argument) 'quote) (cadr argument) argument))
         (files (plist-get (cdr recipe) :files)))
    (should (eq (car recipe) 'fastrevert))
    (should files)
    files))

(defun fastrevert-package-layout-test--linked (dir head)
  "Make DIR hold a repository and a build folder of links, as (HEAD ...) makes one.
The links are to the files that the :files of the README's recipe for
HEAD (`straight-use-package' or `elpaca') name, as both package managers
link them.  Return the build folder."
  (let ((repository (expand-file-name "repos/fastrevert/" dir))
        (build (expand-file-name "build/fastrevert/" dir)))
    (fastrevert-package-test-copy-sources repository)
    (make-directory build t)
    (dolist (spec (fastrevert-package-layout-test--recipe-files head))
      (dolist (file (file-expand-wildcards (expand-file-name spec repository)))
        (make-symbolic-link file (expand-file-name (file-name-nondirectory file) build))))
    (should (file-exists-p (expand-file-name "fastrevert.el" build)))
    build))

(defun fastrevert-package-layout-test--check-linked (head &optional primitive-first)
  "Check that the build folder (HEAD ...) makes leads the build to the sources.
Its Lisp byte-compiles without a warning, and the module is built from
the linked repository and written into the build folder.  With
PRIMITIVE-FIRST, the first use of the module is a call of a native
primitive, `fastrevert-call-process', before the mode is turned on."
  (fastrevert-test-with-temp-dir home
    (let* ((build (fastrevert-package-layout-test--linked home head))
           (result (fastrevert-package-test-emacs
                    home
                    `(progn
                       (require 'bytecomp)
                       (let ((byte-compile-log-warning-function
                              (lambda (string &rest _)
                                (princ (format "compile-warning %s\n" string)))))
                         (byte-recompile-directory ,build 0))
                       (require 'fastrevert)
                       (require 'fastrevert-compile)
                       (princ (format "sources %s\n" (fastrevert-module--source-directory)))
                       (setq fastrevert-always-compile-module t)
                       ,@(and primitive-first
                              '((require 'fastrevert-call)
                                (princ (format "primitive %S module %s\n"
                                               (fastrevert-call-process "true")
                                               fastrevert--module-loaded-file))))
                       (fastrevert-mode 1)
                       (princ (format "mode %S module %s\n" fastrevert-mode
                                      fastrevert--module-loaded-file))
                       ,fastrevert-package-test-revert-form)
                    (list build)))
           (module (expand-file-name (concat "fastrevert-module-" fastrevert-version
                                             module-file-suffix)
                                     build)))
      (ert-info ((cdr result) :prefix (format "%s: " head))
        (should (eql (car result) 0))
        (should-not (string-match-p "^compile-warning " (cdr result)))
        (when primitive-first
          (should (equal (fastrevert-package-test-match "^primitive 0 module \\(.*\\)$" result)
                         module)))
        (should (equal (fastrevert-package-test-match "^sources \\(.*\\)$" result)
                       (file-truename (expand-file-name "repos/fastrevert/" home))))
        (should (equal (fastrevert-package-test-match "^mode t module \\(.*\\)$" result)
                       module))
        (fastrevert-package-test-check-reverted result)))))

(ert-deftest fastrevert-package-layout-straight-links-lead-the-build-to-the-sources ()
  "In the folder of links the README's straight.el recipe makes, the module is
built from the linked repository and written into that folder."
  (fastrevert-package-layout-test--check-linked 'straight-use-package))

(ert-deftest fastrevert-package-layout-elpaca-links-lead-the-build-to-the-sources ()
  "In the folder of links the README's elpaca recipe makes, the module is
built from the linked repository and written into that folder, here at
the first call of a native primitive."
  (fastrevert-package-layout-test--check-linked 'elpaca t))

(defun fastrevert-package-layout-test--emacs-read-only (home directory form load-dirs)
  "Run FORM in an Emacs of HOME that cannot write DIRECTORY.
LOAD-DIRS go on its `load-path'.  Return (EXIT-CODE . OUTPUT).
Root writes through file modes, so as root the Emacs runs as the
user nobody, who owns HOME then (with setpriv(1)), and builds without
the compiler cache that root owns."
  (set-file-modes directory #o555)
  (unwind-protect
      (if (not (zerop (user-uid)))
          (fastrevert-package-test-emacs home form load-dirs)
        (make-directory (expand-file-name ".emacs.d" home) t)
        (call-process "chown" nil nil nil "-R" "nobody:nogroup" home)
        (with-temp-buffer
          (let* ((process-environment
                  (cons "CCACHE_DISABLE=1" (fastrevert-package-test-environment home)))
                 (default-directory home)
                 (code (apply #'call-process
                              "setpriv" nil t nil "--reuid=nobody" "--regid=nogroup"
                              "--clear-groups"
                              (expand-file-name invocation-name invocation-directory)
                              "-Q" "--batch"
                              (append (mapcan (lambda (dir) (list "-L" dir)) load-dirs)
                                      (list "--eval" (prin1-to-string form))))))
            (cons code (buffer-string)))))
    (set-file-modes directory #o755)))

(ert-deftest fastrevert-package-layout-read-only-lisp-builds-under-user-emacs-directory ()
  "With the Lisp read-only, batch Emacs names a command; that command builds the
module under `user-emacs-directory', and the next Emacs finds it there."
  (fastrevert-test-with-temp-dir home
    (let* ((lisp (expand-file-name "site-lisp/fastrevert/" home))
           (sources (fastrevert-package-test-copy-sources (expand-file-name "src/" home)))
           (user-module (expand-file-name
                         (format ".emacs.d/fastrevert/%s/fastrevert-module-%s%s"
                                 fastrevert-version fastrevert-version module-file-suffix)
                         home)))
      ;; A system install: the Lisp and the sources of a package, in a
      ;; folder this user cannot write.
      (make-directory lisp t)
      (dolist (file (directory-files (expand-file-name "lisp" sources) t "\\.el\\'"))
        (copy-file file lisp))
      (dolist (entry '("CMakeLists.txt" "cmake" "module"))
        (let ((from (expand-file-name entry sources)))
          (if (file-directory-p from)
              (copy-directory from (expand-file-name entry lisp) nil t t)
            (copy-file from lisp))))
      (let* ((result (fastrevert-package-layout-test--emacs-read-only
                      home lisp
                      '(progn
                         (require 'fastrevert)
                         (princ (format "writable %S\n" (file-writable-p fastrevert--lisp-directory)))
                         (condition-case err (fastrevert-mode 1)
                           (error (princ (format "error %s\n" (error-message-string err))))))
                      (list lisp)))
             (command (fastrevert-package-test-match "run:  \\(.*\\)$" result)))
        (ert-info ((cdr result) :prefix "asked for: ")
          (should (eql (car result) 0))
          (should (string-match-p "^writable nil$" (cdr result)))
          (should (string-match-p "^error The fastrevert native module .* is not built"
                                  (cdr result)))
          (should command))
        ;; The command the error names, run as it stands.
        (let ((result (fastrevert-package-layout-test--emacs-read-only
                       home lisp
                       `(progn
                          (princ (format "exit %s\n"
                                         (call-process shell-file-name nil nil nil
                                                       shell-command-switch ,command))))
                       (list lisp))))
          (ert-info ((cdr result) :prefix "the command: ")
            (should (string-match-p "^exit 0$" (cdr result)))
            (should (file-exists-p user-module))
            (should-not (directory-files lisp nil "\\`fastrevert-module"))))
        ;; The next Emacs finds it, and builds nothing.
        (let ((result (fastrevert-package-layout-test--emacs-read-only
                       home lisp
                       `(progn
                          (require 'fastrevert)
                          (fastrevert-mode 1)
                          (princ (format "mode %S module %s built %S\n" fastrevert-mode
                                         fastrevert--module-loaded-file
                                         (and (get-buffer "*fastrevert-module-compile*") t)))
                          ,fastrevert-package-test-revert-form)
                       (list lisp))))
          (ert-info ((cdr result) :prefix "next time: ")
            (should (eql (car result) 0))
            (should (equal (fastrevert-package-test-match "^mode t module \\(.*\\) built nil$"
                                                          result)
                           user-module))
            (fastrevert-package-test-check-reverted result)))))))

(ert-deftest fastrevert-package-layout-missing-cmake-is-named-with-its-install-command ()
  "Without CMake on `exec-path', the build says so and how to install it; nothing loads."
  (fastrevert-test-with-temp-dir home
    (let* ((lisp (expand-file-name "lisp/" (fastrevert-package-test-copy-sources
                                            (expand-file-name "src/" home))))
           (bin (expand-file-name "bin/" home)))
      ;; Every program of the system, but CMake.
      (make-directory bin)
      (dolist (directory exec-path)
        (when (file-directory-p directory)
          (dolist (program (directory-files directory t "\\`[^.]"))
            (let ((link (expand-file-name (file-name-nondirectory program) bin)))
              (unless (or (file-exists-p link) (file-symlink-p link)
                          (string-prefix-p "cmake" (file-name-nondirectory program)))
                (make-symbolic-link program link))))))
      (let ((result (fastrevert-package-test-emacs
                     home
                     `(progn
                        (setq exec-path (list ,bin exec-directory)
                              fastrevert-always-compile-module t)
                        (require 'fastrevert)
                        (condition-case err (fastrevert-mode 1)
                          (error (princ (format "error %S %s\n" (car err)
                                                (error-message-string err)))))
                        (princ (format "mode %S module %S\n" fastrevert-mode
                                       (featurep 'fastrevert-module)))
                        ;; Where a package manager put CMake off `exec-path',
                        ;; as a GUI Emacs on macOS may miss Homebrew's.
                        (setq fastrevert-module--tool-directories '("/usr/bin" "/bin"))
                        (condition-case err (fastrevert-mode 1)
                          (error (princ (format "hint %s\n" (error-message-string err))))))
                     (list lisp))))
        (ert-info ((cdr result) :prefix "no cmake: ")
          (should (eql (car result) 0))
          (should (string-match-p
                   "^error user-error Building the fastrevert module failed at step \"check\": CMake is missing"
                   (cdr result)))
          (should (string-match-p "install with:  \\(sudo \\)?apt-get install cmake"
                                  (cdr result)))
          (should (string-match-p "^mode nil module nil$" (cdr result)))
          (should (string-match-p
                   "^hint .*CMake is in /\\(usr/\\)?bin, which this Emacs's `exec-path' lacks"
                   (cdr result))))))))

(ert-deftest fastrevert-package-layout-failed-build-names-its-step-and-keeps-the-buffer ()
  "A source that does not compile: the mode stays off, the message names the step,
and the build's buffer keeps the compiler's error."
  (fastrevert-test-with-temp-dir home
    (let* ((sources (fastrevert-package-test-copy-sources (expand-file-name "src/" home)))
           (lisp (expand-file-name "lisp/" sources)))
      ;; Every file of the core, so that the first one compiled fails.
      (dolist (file (directory-files (expand-file-name "module/core" sources) t "\\.cpp\\'"))
        (with-temp-file file
          (insert-file-contents file)
          (goto-char (point-min))
          (insert "#error fastrevert-test-broken-source\n")))
      (let ((result (fastrevert-package-test-emacs
                     home
                     '(progn
                        (require 'fastrevert)
                        (setq fastrevert-always-compile-module t
                              fastrevert--build-in-background t)
                        (let ((messages nil))
                          (advice-add 'message :before
                                      (lambda (format &rest args)
                                        (when format
                                          (push (apply #'format-message format args) messages))))
                          (fastrevert-mode 1)
                          (while (fastrevert-module--build-running-p)
                            (accept-process-output nil 0.1))
                          (princ (format "mode %S module %S\n" fastrevert-mode
                                         (featurep 'fastrevert-module)))
                          (princ (format "last-message %s\n" (car messages))))
                        ;; A primitive called now reports the failure, and
                        ;; builds nothing again.
                        (let ((size (with-current-buffer "*fastrevert-module-compile*"
                                      (buffer-size))))
                          (condition-case err (fastrevert-call-process "true")
                            (error (princ (format "call-error %S\n" (car err)))))
                          (princ (format "rebuilt %S\n"
                                         (or (fastrevert-module--build-running-p)
                                             (/= size (with-current-buffer
                                                          "*fastrevert-module-compile*"
                                                        (buffer-size)))))))
                        (with-current-buffer "*fastrevert-module-compile*"
                          (princ (format "buffer-mode %S broken %S\n" major-mode
                                         (save-excursion
                                           (goto-char (point-min))
                                           (and (search-forward
                                                 "fastrevert-test-broken-source" nil t)
                                                t))))))
                     (list lisp))))
        (ert-info ((cdr result) :prefix "broken: ")
          (should (eql (car result) 0))
          (should (string-match-p "^mode nil module nil$" (cdr result)))
          (should (string-match-p
                   "^last-message .*failed at step \"build\": cmake exited with code [1-9]"
                   (cdr result)))
          (should (string-match-p "^buffer-mode compilation-mode broken t$"
                                  (cdr result)))
          (should (string-match-p "^call-error fastrevert-module-build-failed$" (cdr result)))
          (should (string-match-p "^rebuilt nil$" (cdr result))))))))

(provide 'fastrevert-package-layout-test)

;;; fastrevert-package-layout-test.el ends here
