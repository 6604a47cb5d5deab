;;; fastrevert-compile.el --- Build the fastrevert native module -*- lexical-binding: t; -*-

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; `fastrevert-module-compile' builds the native module with CMake in a
;; `compilation-mode' buffer, waits for the build, and loads the result.
;; The module is written next to fastrevert.el, so `require' finds it
;; with nothing but fastrevert's Lisp directory on `load-path'.

;;; Code:

(require 'compile)

(defgroup fastrevert-compile nil
  "Building the fastrevert native module."
  :group 'fastrevert
  :prefix "fastrevert-module-")

(defcustom fastrevert-module-build-directory nil
  "Directory for CMake's build files; nil means \"build\" in the source tree."
  :type '(choice (const :tag "build/ in the source tree" nil) directory))

(defcustom fastrevert-module-cmake-options '("-DCMAKE_BUILD_TYPE=Release")
  "Extra options passed to CMake when configuring the module build."
  :type '(repeat string))

(defconst fastrevert--lisp-directory
  (file-name-directory (or load-file-name buffer-file-name default-directory))
  "The directory holding fastrevert's Lisp files and its native module.")

(defun fastrevert--source-root ()
  "Return fastrevert's source tree, the directory holding CMakeLists.txt."
  (let ((root (file-name-directory (directory-file-name fastrevert--lisp-directory))))
    (unless (file-exists-p (expand-file-name "CMakeLists.txt" root))
      (user-error "Cannot build the fastrevert module: no CMakeLists.txt in %s" root))
    root))

(defun fastrevert--module-compile-command (root)
  "Return the shell command that builds the module from ROOT.
The module gets this Emacs's `module-file-suffix', which is what its
`load' looks for (\".dylib\" on macOS)."
  (let ((build (expand-file-name (or fastrevert-module-build-directory "build") root)))
    (format "cmake -S %s -B %s %s -DFASTREVERT_MODULE_DIR=%s -DFASTREVERT_MODULE_SUFFIX=%s -DCMAKE_COLOR_DIAGNOSTICS=OFF && cmake --build %s --target fastrevert-module fastrevert-lisp"
            (shell-quote-argument (directory-file-name root))
            (shell-quote-argument build)
            (mapconcat #'shell-quote-argument fastrevert-module-cmake-options " ")
            (shell-quote-argument (directory-file-name fastrevert--lisp-directory))
            (shell-quote-argument module-file-suffix)
            (shell-quote-argument build))))

(defconst fastrevert--module-compile-environment
  '("TERM=dumb" "CLICOLOR=0" "CLICOLOR_FORCE=0")
  "The environment the module build runs in, on top of Emacs's own.
The build runs on a terminal, where CMake and the compilers would colour
their output with escape sequences that a compilation buffer shows raw;
these ask every one of them for plain text.")

;;;###autoload
(defun fastrevert-module-compile ()
  "Build fastrevert's native module with CMake, then load it.
The build runs in a `compilation-mode' buffer; this command waits for it."
  (interactive)
  (unless module-file-suffix
    (user-error "Fastrevert needs an Emacs built with dynamic module support"))
  (let* ((default-directory (fastrevert--source-root))
         (compilation-environment
          (append fastrevert--module-compile-environment compilation-environment))
         (buffer (compilation-start (fastrevert--module-compile-command default-directory)
                                    nil (lambda (_mode) "*fastrevert-module-compile*")))
         (process (get-buffer-process buffer)))
    (while (process-live-p process)
      (accept-process-output process 0.1))
    (unless (and (eq (process-status process) 'exit)
                 (zerop (process-exit-status process)))
      (error "Building the fastrevert module failed; see buffer %s" (buffer-name buffer)))
    (load (expand-file-name "fastrevert-module" fastrevert--lisp-directory) nil t)))

(provide 'fastrevert-compile)

;;; fastrevert-compile.el ends here
