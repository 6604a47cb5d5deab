;;; fastrevert-compile.el --- Build the fastrevert native module -*- lexical-binding: t; -*-

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; The native module is built with CMake from the sources that come
;; with the Lisp, wherever a package manager put them (see
;; `fastrevert-module--source-directory'), in a `compilation-mode'
;; buffer, while Emacs goes on.  The build is a row of steps, each
;; checked: the tools it needs are looked for first, each missing one
;; named with the command that installs it on this system; CMake
;; configures and builds; the module is copied into place under its
;; versioned name; and it is loaded.  A step that fails ends the build
;; with the buffer shown and one message naming the step.
;;
;; The module goes next to the Lisp when that directory is writable,
;; else into a folder of its own version under `user-emacs-directory'
;; (see `fastrevert--module-target-directory'), where the Lisp looks
;; for it next time.

;;; Code:

(require 'cl-lib)
(require 'compile)
(require 'subr-x)
(require 'fastrevert-engine)

(defgroup fastrevert-compile nil
  "Building the fastrevert native module."
  :group 'fastrevert
  :prefix "fastrevert-module-")

(defcustom fastrevert-module-build-directory nil
  "Directory for CMake's build files, or nil.
nil means \"build-module\" in the source tree, or, when the source
tree is read-only, \"build\" in the module's folder under
`user-emacs-directory'."
  :type '(choice (const :tag "Beside the sources" nil) directory))

(defcustom fastrevert-module-cmake-options '("-DCMAKE_BUILD_TYPE=Release")
  "Extra options passed to CMake when configuring the module build."
  :type '(repeat string))

(defconst fastrevert-module--buffer-name "*fastrevert-module-compile*"
  "The name of the buffer the build runs in.")

;;;; Where the sources are

(defun fastrevert-module--parent (directory)
  "Return the parent of DIRECTORY, as a directory name."
  (file-name-directory (directory-file-name directory)))

(defun fastrevert-module--source-directory ()
  "Return the directory of fastrevert's CMakeLists.txt, or nil if none is found.
The repository and a package-vc checkout have the Lisp in lisp/
beside it; a package (package.el's tarball, a MELPA build) has it
next to the Lisp.  straight.el and elpaca link the Lisp files into a
folder of their own: the links lead back to the repository."
  (let* ((lisp fastrevert--lisp-directory)
         (real (file-name-directory
                (file-truename (expand-file-name "fastrevert.el" lisp))))
         (found nil))
    (dolist (directory (list lisp (fastrevert-module--parent lisp)
                             real (fastrevert-module--parent real)))
      (when (and (not found)
                 (file-exists-p (expand-file-name "CMakeLists.txt" directory))
                 (file-exists-p (expand-file-name "module/CMakeLists.txt" directory)))
        (setq found (file-name-as-directory directory))))
    found))

(defun fastrevert-module--build-directory-for (source)
  "Return the directory CMake builds in, for the sources in SOURCE."
  (file-name-as-directory
   (cond (fastrevert-module-build-directory
          (expand-file-name fastrevert-module-build-directory))
         ((file-writable-p source) (expand-file-name "build-module" source))
         (t (expand-file-name "build" (fastrevert--user-module-directory))))))

;;;; What the build needs

(defconst fastrevert-module--system-packages
  '((apt-get "apt-get install"
             (cmake . "cmake") (c++ . "g++") (pkg-config . "pkg-config")
             (libuv . "libuv1-dev") (emacs-module.h . "emacs-nox"))
    (brew "brew install"
          (cmake . "cmake") (pkg-config . "pkgconf") (libuv . "libuv")
          (emacs-module.h . "emacs"))
    (port "port install"
          (cmake . "cmake") (pkg-config . "pkgconfig") (libuv . "libuv")
          (emacs-module.h . "emacs"))
    (pkg "pkg install"
         (cmake . "cmake") (pkg-config . "pkgconf") (libuv . "libuv")
         (emacs-module.h . "emacs-nox"))
    (apk "apk add"
         (cmake . "cmake") (c++ . "g++") (pkg-config . "pkgconf") (libuv . "libuv-dev")
         (emacs-module.h . "emacs-nox"))
    (dnf "dnf install"
         (cmake . "cmake") (c++ . "gcc-c++") (pkg-config . "pkgconf-pkg-config")
         (libuv . "libuv-devel") (emacs-module.h . "emacs-devel"))
    (pacman "pacman -S --needed"
            (cmake . "cmake") (c++ . "gcc") (pkg-config . "pkgconf") (libuv . "libuv")
            (emacs-module.h . "emacs-nox")))
  "For each package manager: its install command and the package of each need.
The names are those of the Makefile's `make deps' table.  A need
without a package there comes with the system: the compiler is
Xcode's on macOS and the base system's on FreeBSD.")

(defconst fastrevert-module--need-names
  '((cmake . "CMake") (c++ . "a C++17 compiler") (pkg-config . "pkg-config")
    (libuv . "libuv 1.40 or later") (emacs-module.h . "emacs-module.h"))
  "How the build's messages name each thing it needs.")

(defvar fastrevert-module--tool-directories
  '("/opt/homebrew/bin" "/usr/local/bin" "/opt/local/bin" "/home/linuxbrew/.linuxbrew/bin")
  "Folders where package managers put programs that a GUI Emacs may not see.
An Emacs started from a desktop's menu or the Dock does not read the
shell's start-up files, so its variable `exec-path' may lack them.")

(defun fastrevert-module--package-manager ()
  "Return the package manager of this system, a key of the packages table, or nil."
  (cl-find-if (lambda (manager)
                (or (executable-find (symbol-name manager))
                    (and (eq manager 'brew)
                         (cl-some #'file-executable-p
                                  '("/opt/homebrew/bin/brew" "/usr/local/bin/brew")))))
              (if (eq system-type 'darwin)
                  '(brew port)
                '(apt-get dnf pacman apk pkg))))

(defun fastrevert-module--install-command (needs)
  "Return the command to install NEEDS with on this system, or nil.
NEEDS are keys of `fastrevert-module--need-names'."
  (let* ((manager (fastrevert-module--package-manager))
         (entry (cdr (assq manager fastrevert-module--system-packages)))
         (packages (delq nil (mapcar (lambda (need) (cdr (assq need (cdr entry)))) needs))))
    (when packages
      (concat (if (or (eq manager 'brew) (zerop (user-uid))) "" "sudo ")
              (car entry) " " (string-join packages " ")))))

(defun fastrevert-module--environment ()
  "Return the `process-environment' for the build to run in.
Its PATH is the variable `exec-path', where the checks found the
tools.  The build
runs on no terminal, yet CMake and the compilers would colour their
output with escape sequences that a compilation buffer shows raw:
these ask every one of them for plain text."
  (append (list "TERM=dumb" "CLICOLOR=0" "CLICOLOR_FORCE=0"
                (concat "PATH=" (mapconcat #'directory-file-name
                                           (delete-dups (delq nil (copy-sequence exec-path)))
                                           path-separator)))
          process-environment))

(defun fastrevert-module--header-major-version (file)
  "Return the Emacs major version of the module API header FILE, or nil."
  (with-temp-buffer
    (insert-file-contents file)
    (and (re-search-forward "^#define EMACS_MAJOR_VERSION \\([0-9]+\\)" nil t)
         (string-to-number (match-string 1)))))

(defun fastrevert-module--header-directory ()
  "Return the directory of the emacs-module.h to build against, or nil.
That is the header of this Emacs, found from where it is installed
\(or built), else another of Emacs 28 or later."
  (let ((candidates
         (delete-dups
          (mapcar #'file-name-as-directory
                  (delq nil (list (expand-file-name "../../../include" data-directory)
                                  (expand-file-name "../include" data-directory)
                                  (expand-file-name "../include" invocation-directory)
                                  (and installation-directory
                                       (expand-file-name "src" installation-directory))
                                  "/usr/local/include" "/opt/homebrew/include"
                                  "/opt/local/include" "/usr/include")))))
        (own nil)
        (other nil))
    (dolist (directory candidates)
      (let* ((header (expand-file-name "emacs-module.h" directory))
             (major (and (file-readable-p header)
                         (fastrevert-module--header-major-version header))))
        (cond ((not major))
              ((= major emacs-major-version) (unless own (setq own directory)))
              ((>= major 28) (unless other (setq other directory))))))
    (or own other)))

(defun fastrevert-module--option-value (name)
  "Return the value that `fastrevert-module-cmake-options' gives NAME, or nil.
NAME is a CMake variable."
  (let ((prefix (concat "-D" name "=")))
    (cl-some (lambda (option)
               (and (string-prefix-p prefix option) (substring option (length prefix))))
             fastrevert-module-cmake-options)))

(defun fastrevert-module--find-needs ()
  "Look for what the build needs; return an alist (NEED . WHERE).
WHERE is where NEED was found, or nil if it was not."
  (let* ((process-environment (fastrevert-module--environment))
         (default-directory temporary-file-directory)
         (cmake (executable-find "cmake"))
         (compiler (cl-some #'executable-find
                            (delq nil (list (getenv "CXX") "c++" "g++" "clang++"))))
         (pkg-config (executable-find "pkg-config"))
         (libuv (and pkg-config
                     (eq 0 (call-process pkg-config nil nil nil
                                         "--atleast-version=1.40" "libuv"))
                     (with-temp-buffer
                       (call-process pkg-config nil t nil "--modversion" "libuv")
                       (concat "version " (string-trim (buffer-string))))))
         (header (or (fastrevert-module--option-value "EMACS_MODULE_INCLUDE_DIR")
                     (fastrevert-module--header-directory))))
    `((cmake . ,cmake) (c++ . ,compiler) (pkg-config . ,pkg-config)
      (libuv . ,(if pkg-config libuv "not looked for without pkg-config"))
      (emacs-module.h . ,header))))

(defun fastrevert-module--outside-exec-path (need)
  "Return where the program for NEED is, off the variable `exec-path', or nil.
That is one of `fastrevert-module--tool-directories' which the
variable `exec-path' lacks."
  (let ((program (pcase need
                   ('cmake "cmake") ('c++ "c++") ('pkg-config "pkg-config"))))
    (and program
         (cl-find-if (lambda (directory)
                       (and (not (member (file-name-as-directory directory)
                                         (mapcar #'file-name-as-directory
                                                 (delq nil (copy-sequence exec-path)))))
                            (file-executable-p (expand-file-name program directory))))
                     fastrevert-module--tool-directories))))

(defun fastrevert-module--check-needs (build)
  "Check for what BUILD needs, reporting into its buffer; signal if any is missing."
  (let* ((found (fastrevert-module--find-needs))
         (missing (cl-remove-if #'cdr found))
         (lines nil)
         (summary nil))
    (fastrevert-module--insert
     build (concat "Looking for what the build needs:\n"
                   (mapconcat (lambda (entry)
                                (format "  %-22s %s"
                                        (cdr (assq (car entry) fastrevert-module--need-names))
                                        (or (cdr entry) "MISSING")))
                              found "\n")
                   "\n"))
    (when missing
      (let* ((needs (mapcar #'car missing))
             (names (mapcar (lambda (need) (cdr (assq need fastrevert-module--need-names)))
                            needs))
             (command (fastrevert-module--install-command needs)))
        (push (format "%s %s missing" (string-join names ", ")
                      (if (cdr names) "are" "is"))
              summary)
        (dolist (need needs)
          (let ((elsewhere (fastrevert-module--outside-exec-path need)))
            (when elsewhere
              (push (format "%s is in %s, which this Emacs's `exec-path' lacks (an Emacs \
started from a desktop or the Dock does not read your shell's PATH): add it, e.g. \
with (add-to-list 'exec-path %S) and (setenv \"PATH\" (concat %S path-separator \
(getenv \"PATH\")))"
                            (cdr (assq need fastrevert-module--need-names))
                            elsewhere elsewhere elsewhere)
                    lines))))
        (when (memq 'c++ needs)
          (pcase (fastrevert-module--package-manager)
            ((or 'brew 'port) (push "the C++ compiler comes with Xcode's command line \
tools: xcode-select --install" lines))))
        (when (memq 'emacs-module.h needs)
          (push (format "emacs-module.h of Emacs %d was looked for where this Emacs is \
installed; for an Emacs built from source, pass its src/ folder in \
`fastrevert-module-cmake-options' as -DEMACS_MODULE_INCLUDE_DIR=DIR"
                        emacs-major-version)
                lines))
        (when command
          (push (concat "install with:  " command) summary))
        (unless command
          (push "install them with your system's package manager" summary))
        (fastrevert-module--insert
         build (concat "\n" (mapconcat #'identity (append (reverse summary) (reverse lines))
                                       "\n")
                       "\n"))
        (error "%s" (string-join (append (reverse summary) (reverse lines)) "; "))))))

;;;; The build

(cl-defstruct (fastrevert-module--build
               (:constructor fastrevert-module--make-build)
               (:copier nil))
  "A build of the module: where it runs, its steps, and how it stands."
  buffer source directory steps step (state 'running) failure thens process waited)

(defvar fastrevert-module--last nil
  "The build under way, or the last one.")

(defun fastrevert-module--build-running-p ()
  "Return non-nil if a build of the module is under way."
  (and fastrevert-module--last
       (eq (fastrevert-module--build-state fastrevert-module--last) 'running)))

(defun fastrevert-module--last-failure ()
  "Return the message of how the last build failed, or nil if it did not."
  (and fastrevert-module--last
       (eq (fastrevert-module--build-state fastrevert-module--last) 'failed)
       (fastrevert-module--failure-message fastrevert-module--last)))

(defun fastrevert-module--insert (build text)
  "Insert TEXT at the end of BUILD's buffer."
  (let ((buffer (fastrevert-module--build-buffer build)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (let ((inhibit-read-only t))
          (save-excursion
            (goto-char (point-max))
            (insert text)))))))

(defun fastrevert-module--set-mode-line (build text)
  "Show TEXT in the mode line of BUILD's buffer."
  (let ((buffer (fastrevert-module--build-buffer build)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (setq mode-line-process text)
        (force-mode-line-update)))))

(defun fastrevert-module--start-process (build program args)
  "Run PROGRAM with ARGS as BUILD's current step; return the process."
  (let* ((process-environment (fastrevert-module--environment))
         (default-directory (fastrevert-module--build-source build))
         (command (cons (or (executable-find program) program) args))
         (step (fastrevert-module--build-step build)))
    (fastrevert-module--insert
     build (concat "\n$ " (mapconcat #'shell-quote-argument command " ") "\n"))
    (setf (fastrevert-module--build-process build)
          (make-process
           :name (concat "fastrevert-module-" step)
           :buffer (fastrevert-module--build-buffer build)
           :command command
           :connection-type 'pipe
           :filter #'compilation-filter
           :sentinel
           (lambda (process _event)
             (unless (process-live-p process)
               (let ((code (process-exit-status process)))
                 (if (and (eq (process-status process) 'exit) (zerop code))
                     (fastrevert-module--run build)
                   (fastrevert-module--fail
                    build step (if (eq (process-status process) 'exit)
                                   (format "%s exited with code %d"
                                           (file-name-nondirectory (car command)) code)
                                 (format "%s was stopped by signal %d"
                                         (file-name-nondirectory (car command)) code)))))))))))

(defun fastrevert-module--configure (build)
  "Start CMake's configure step of BUILD; return its process."
  (let* ((source (fastrevert-module--build-source build))
         (directory (fastrevert-module--build-directory build))
         (cache (expand-file-name "CMakeCache.txt" directory))
         (header (or (fastrevert-module--option-value "EMACS_MODULE_INCLUDE_DIR")
                     (fastrevert-module--header-directory))))
    ;; A build directory left by the sources of another place (another
    ;; version's package folder) is started afresh: CMake refuses it.
    (when (file-exists-p cache)
      (let ((home (with-temp-buffer
                    (insert-file-contents cache)
                    (and (re-search-forward "^CMAKE_HOME_DIRECTORY:INTERNAL=\\(.*\\)$" nil t)
                         (match-string 1)))))
        (unless (and home (file-equal-p home source))
          (delete-file cache)
          (delete-directory (expand-file-name "CMakeFiles" directory) t))))
    (make-directory directory t)
    (fastrevert-module--start-process
     build "cmake"
     (append (list "-S" (directory-file-name source)
                   "-B" (directory-file-name directory)
                   "-DFASTREVERT_BUILD_TESTS=OFF" "-DFASTREVERT_BUILD_LISP=OFF"
                   (concat "-DFASTREVERT_MODULE_DIR="
                           (expand-file-name "module-output" directory))
                   (concat "-DFASTREVERT_MODULE_SUFFIX=" module-file-suffix)
                   (concat "-DFASTREVERT_EMACS="
                           (expand-file-name invocation-name invocation-directory))
                   (concat "-DEMACS_MODULE_INCLUDE_DIR=" (directory-file-name header))
                   "-DCMAKE_COLOR_DIAGNOSTICS=OFF")
             fastrevert-module-cmake-options))))

(defun fastrevert-module--compile (build)
  "Start CMake's build step of BUILD; return its process."
  (fastrevert-module--start-process
   build "cmake"
   (list "--build" (directory-file-name (fastrevert-module--build-directory build))
         "--target" "fastrevert-module"
         "--parallel" (number-to-string (max 1 (num-processors))))))

(defun fastrevert-module--install (build)
  "Put the module BUILD made into place under its versioned name."
  (let* ((name (fastrevert--module-file-name))
         (built (expand-file-name name (expand-file-name "module-output"
                                                         (fastrevert-module--build-directory
                                                          build))))
         (target (fastrevert--module-target-directory))
         (file (expand-file-name name target))
         (temporary (concat file ".new")))
    (unless (file-exists-p built)
      (error "The build made no %s: does fastrevert.el's Version: header say %s?"
             name fastrevert-version))
    (make-directory target t)
    ;; Renamed into place, so that an Emacs which has loaded a module of
    ;; that name keeps the file it mapped.
    (copy-file built temporary t)
    (rename-file temporary file t)
    (fastrevert-module--insert build (format "\nInstalled %s\n" file))))

(defun fastrevert-module--load (build)
  "Load the module that BUILD installed, unless this Emacs has one loaded."
  (if (fastrevert--module-loaded-p)
      (fastrevert-module--insert
       build "This Emacs has loaded a fastrevert module already, and keeps it until \
it exits: restart Emacs to load the new one.\n")
    (fastrevert--load-module)
    (fastrevert-module--insert
     build (format "Loaded %s (module API of Emacs %d)\n"
                   fastrevert--module-loaded-file (fastrevert--mod-module-api)))))

(defconst fastrevert-module--steps
  '(("check" . fastrevert-module--check-needs)
    ("configure" . fastrevert-module--configure)
    ("build" . fastrevert-module--compile)
    ("install" . fastrevert-module--install)
    ("load" . fastrevert-module--load))
  "What a build does, in order: each step's name and its function of the build.
A function that starts a process returns it, and the build goes on
when the process has exited successfully.")

(defun fastrevert-module--run (build)
  "Go on with BUILD from its next step.
Steps run until one has started a process, whose sentinel goes on,
or one fails."
  (catch 'waiting
    (while (and (eq (fastrevert-module--build-state build) 'running)
                (fastrevert-module--build-steps build))
      (let ((step (pop (fastrevert-module--build-steps build))))
        (setf (fastrevert-module--build-step build) (car step))
        (fastrevert-module--set-mode-line build (format ":%s" (car step)))
        (condition-case err
            (when (processp (funcall (cdr step) build))
              (throw 'waiting nil))
          (error (fastrevert-module--fail build (car step) (error-message-string err))))))
    (when (eq (fastrevert-module--build-state build) 'running)
      (fastrevert-module--succeed build))))

(defun fastrevert-module--failure-message (build)
  "Return the message to tell how BUILD failed with."
  (format "Building the fastrevert module failed at step \"%s\": %s (see buffer %s)"
          (fastrevert-module--build-step build)
          (fastrevert-module--build-failure build)
          fastrevert-module--buffer-name))

(defun fastrevert-module--fail (build step reason)
  "End BUILD as failed at STEP for REASON, keeping its buffer shown."
  (setf (fastrevert-module--build-state build) 'failed
        (fastrevert-module--build-step build) step
        (fastrevert-module--build-failure build) reason
        (fastrevert-module--build-thens build) nil)
  (fastrevert-module--insert build (format "\nStep \"%s\" failed: %s\n" step reason))
  (fastrevert-module--set-mode-line build (format ":failed at %s" step))
  (let ((buffer (fastrevert-module--build-buffer build)))
    (when (buffer-live-p buffer)
      (if noninteractive
          ;; Batch Emacs shows no buffer: its output tells what happened.
          (message "%s" (with-current-buffer buffer (buffer-string)))
        (display-buffer buffer)))
    ;; A caller that waits signals the failure instead.
    (unless (fastrevert-module--build-waited build)
      (message "%s" (fastrevert-module--failure-message build)))))

(defun fastrevert-module--succeed (build)
  "End BUILD as done, and call what waited for the module."
  (setf (fastrevert-module--build-state build) 'done)
  (fastrevert-module--set-mode-line build ":done")
  (fastrevert-module--insert build "\nThe fastrevert module is built.\n")
  (let ((thens (reverse (fastrevert-module--build-thens build))))
    (setf (fastrevert-module--build-thens build) nil)
    ;; What waited for the module says what it did with it.
    (unless (or thens noninteractive)
      (message "The fastrevert module is built and loaded"))
    (dolist (then thens)
      (condition-case err
          (funcall then)
        (error (message "fastrevert: after building the module: %s"
                        (error-message-string err)))))))

(defun fastrevert-module--build (wait then)
  "Build, install and load the module, or join the build under way.
With WAIT non-nil, return once the build has ended, and signal
`fastrevert-module-build-failed' if it failed.  THEN, if non-nil, is
a function of no argument that the build calls once it has loaded
the module."
  (let ((build fastrevert-module--last))
    (unless (fastrevert-module--build-running-p)
      (let ((source (fastrevert-module--source-directory)))
        (unless source
          (signal 'fastrevert-module-build-failed
                  (list (format "Cannot build the fastrevert module: no CMakeLists.txt \
beside the Lisp in %s, nor in its parent or the folders its links lead to"
                                fastrevert--lisp-directory))))
        (setq build (fastrevert-module--make-build
                     :buffer (get-buffer-create fastrevert-module--buffer-name)
                     :source source
                     :directory (fastrevert-module--build-directory-for source)
                     :steps (copy-sequence fastrevert-module--steps)
                     :waited wait)
              fastrevert-module--last build)
        (with-current-buffer (fastrevert-module--build-buffer build)
          (let ((inhibit-read-only t))
            (erase-buffer))
          (compilation-mode)
          (setq default-directory source))
        (fastrevert-module--insert
         build (format "Building the fastrevert module %s for Emacs %s\n\
Sources: %s\nBuild:   %s\nModule:  %s\n\n"
                       fastrevert-version emacs-version source
                       (fastrevert-module--build-directory build)
                       (expand-file-name (fastrevert--module-file-name)
                                         (fastrevert--module-target-directory))))
        (unless (or wait noninteractive)
          (display-buffer (fastrevert-module--build-buffer build)))
        (when then
          (push then (fastrevert-module--build-thens build)))
        (fastrevert-module--run build)
        (setq then nil)))
    (when then
      (push then (fastrevert-module--build-thens build)))
    (when wait
      (setf (fastrevert-module--build-waited build) t)
      (while (eq (fastrevert-module--build-state build) 'running)
        (accept-process-output nil 0.05))
      (when (eq (fastrevert-module--build-state build) 'failed)
        (signal 'fastrevert-module-build-failed
                (list (fastrevert-module--failure-message build)))))))

(defun fastrevert-module--build-command ()
  "Return the shell command that builds the module from outside Emacs."
  (format "%s -Q --batch -L %s -l fastrevert-compile -f fastrevert-module-compile"
          (shell-quote-argument (expand-file-name invocation-name invocation-directory))
          (shell-quote-argument (directory-file-name fastrevert--lisp-directory))))

;;;###autoload
(defun fastrevert-module-compile ()
  "Build fastrevert's native module with CMake, then load it.
The build runs in the buffer *fastrevert-module-compile* while Emacs
goes on; batch Emacs waits for it.  Each step is checked, and a
failure is reported naming its step, with the buffer kept."
  (interactive)
  (unless module-file-suffix
    (user-error "Fastrevert needs an Emacs built with dynamic module support"))
  (fastrevert-module--build noninteractive nil))

(provide 'fastrevert-compile)

;;; fastrevert-compile.el ends here
