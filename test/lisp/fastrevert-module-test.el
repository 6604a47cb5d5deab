;;; fastrevert-module-test.el --- Tests of loading, the module boundary and the engine -*- lexical-binding: t; -*-

;;; Commentary:

;; Loading and the version handshake, errors crossing the module
;; boundary, and the engine's round trip through its wake channel.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'fastrevert)
(require 'lisp-mnt)

;;;; Loading and the version check

(ert-deftest fastrevert-module-version-matches-lisp-and-header ()
  (should (equal (fastrevert--mod-version) fastrevert-version))
  (should (featurep 'fastrevert-module))
  (should (equal (file-name-nondirectory fastrevert--module-loaded-file)
                 (concat "fastrevert-module-" fastrevert-version module-file-suffix)))
  (should (equal (lm-version (expand-file-name "lisp/fastrevert.el" fastrevert-test-root))
                 fastrevert-version)))

(ert-deftest fastrevert-module-was-built-for-this-emacs-module-api ()
  (should (equal (fastrevert--mod-module-api) emacs-major-version)))

(ert-deftest fastrevert-module-version-mismatch-asks-for-a-restart ()
  (let ((err (should-error (fastrevert--check-module-version "0.0.0-other")
                           :type 'fastrevert-module-version-mismatch)))
    (should (string-match-p "restart Emacs" (cadr err))))
  (should (null (fastrevert--check-module-version fastrevert-version))))

(defun fastrevert-module-test--native-functions-declared ()
  "Return the native functions that the Lisp declares, sorted."
  (let ((names nil))
    (dolist (file (directory-files (expand-file-name "lisp/" fastrevert-test-root) t "\\.el\\'"))
      (with-temp-buffer
        (insert-file-contents file)
        (while (re-search-forward
                "(declare-function \\(fastrevert--mod-[-a-z]+\\) \"fastrevert-module\"" nil t)
          (cl-pushnew (intern (match-string 1)) names))))
    (sort names #'string<)))

(ert-deftest fastrevert-module-every-native-function-has-a-stub-until-loaded ()
  "Each function the module defines is one the Lisp can call before loading it."
  (fastrevert--load-module)
  (let ((defined (sort (apropos-internal "\\`fastrevert--mod-"
                                         (lambda (symbol)
                                           (and (fboundp symbol)
                                                (module-function-p (symbol-function symbol)))))
                       #'string<)))
    (should (equal defined (sort (copy-sequence fastrevert--module-functions) #'string<)))
    (should-not (cl-set-difference (fastrevert-module-test--native-functions-declared)
                                   fastrevert--module-functions))))

(defun fastrevert-module-test--lisp-copy (dir &optional version)
  "Copy the Lisp into DIR, as VERSION if given; return DIR."
  (dolist (file (directory-files (expand-file-name "lisp/" fastrevert-test-root) t "\\.el\\'"))
    (copy-file file dir))
  (when version
    (dolist (file (directory-files dir t "\\.el\\'"))
      (with-temp-file file
        (insert-file-contents file)
        (goto-char (point-min))
        (while (re-search-forward (concat "\"" (regexp-quote fastrevert-version) "\"\\|"
                                          "^;; Version: " (regexp-quote fastrevert-version))
                                  nil t)
          (replace-match (if (eq (char-after (match-beginning 0)) ?\")
                             (concat "\"" version "\"")
                           (concat ";; Version: " version))
                         t t)))))
  dir)

(ert-deftest fastrevert-module-loading-the-lisp-loads-no-module ()
  "Loading every library loads nothing native; the first native call does."
  (let ((result (fastrevert-test-batch-emacs
                 (list fastrevert-test-lisp-directory)
                 '(progn
                    (require 'fastrevert)
                    (require 'fastrevert-report)
                    (princ (format "after-require %S\n" (featurep 'fastrevert-module)))
                    (fastrevert-stats)
                    (fastrevert--mod-running-p)
                    (fastrevert--mod-stop)
                    (princ (format "after-queries %S\n" (featurep 'fastrevert-module)))
                    (princ (format "version %S\n" (fastrevert--mod-version)))
                    (princ (format "after-call %S\n" (featurep 'fastrevert-module)))))))
    (should (= (car result) 0))
    (should (string-match-p "^after-require nil$" (cdr result)))
    (should (string-match-p "^after-queries nil$" (cdr result)))
    (should (string-match-p (format "^version \"%s\"$" (regexp-quote fastrevert-version))
                            (cdr result)))
    (should (string-match-p "^after-call t$" (cdr result)))))

(ert-deftest fastrevert-module-missing-in-batch-asks-nothing-and-names-the-command ()
  (fastrevert-test-with-temp-dir dir
    (fastrevert-module-test--lisp-copy dir)
    (let ((result (fastrevert-test-batch-emacs
                   (list dir)
                   '(progn
                      (fset 'y-or-n-p (lambda (&rest _) (princ "asked\n") t))
                      (require 'fastrevert)
                      (princ (format "command %s\n" (fastrevert-module--build-command)))
                      (condition-case err (fastrevert-mode 1)
                        (error (princ (format "mode-error %S %s\n" (car err)
                                              (error-message-string err)))))
                      (princ (format "mode %S\n" fastrevert-mode))
                      (condition-case err (fastrevert-call-process "true")
                        (error (princ (format "call-error %S\n" (car err)))))
                      (princ (format "module %S\n" (featurep 'fastrevert-module)))))))
      (should (= (car result) 0))
      (should-not (string-match-p "^asked$" (cdr result)))
      (should (string-match-p "^mode-error user-error The fastrevert native module " (cdr result)))
      (should (string-match-p "^call-error fastrevert-module-missing$" (cdr result)))
      (should (string-match-p "^mode nil$" (cdr result)))
      (should (string-match-p "^module nil$" (cdr result)))
      ;; The message names the exact shell command, and the command.
      (let ((command (and (string-match "^command \\(.*\\)$" (cdr result))
                          (match-string 1 (cdr result)))))
        (should (string-match-p "fastrevert-module-compile" command))
        (should (string-search command (cdr result)))
        (should (string-match-p (concat "M-x fastrevert-module-compile.*"
                                        (regexp-quote command))
                                (cdr result)))))))

(ert-deftest fastrevert-module-missing-is-asked-about-once ()
  "An interactive Emacs asks once whether to build; after a no, it only says how."
  (fastrevert-test-with-temp-dir dir
    (fastrevert-module-test--lisp-copy dir)
    (let ((result (fastrevert-test-batch-emacs
                   (list dir)
                   '(let ((asked 0)
                          (noninteractive nil))
                      (fset 'y-or-n-p (lambda (&rest _) (setq asked (1+ asked)) nil))
                      (require 'fastrevert)
                      (dotimes (_ 2)
                        (condition-case err (fastrevert-mode 1)
                          (user-error (princ (format "mode-error %s\n" (cadr err))))))
                      (condition-case err (fastrevert-call-process "true")
                        (fastrevert-module-missing (princ (format "call-error %S\n" (car err)))))
                      (princ (format "asked %d mode %S module %S built %S\n" asked fastrevert-mode
                                     (featurep 'fastrevert-module)
                                     (and (get-buffer "*fastrevert-module-compile*") t)))))))
      (should (= (car result) 0))
      (should (string-match-p "^asked 1 mode nil module nil built nil$" (cdr result)))
      (should (= 2 (cl-count-if (lambda (line) (string-match-p "\\`mode-error The fastrevert native module .* M-x fastrevert-module-compile" line))
                                (split-string (cdr result) "\n"))))
      (should (string-match-p "^call-error fastrevert-module-missing$" (cdr result))))))

(ert-deftest fastrevert-module-of-another-version-is-never-loaded ()
  "The Lisp of 99.0.0 passes over this version's module, and refuses one mislabelled."
  (fastrevert-test-with-temp-dir dir
    (fastrevert-module-test--lisp-copy dir "99.0.0")
    (copy-file (expand-file-name (concat "fastrevert-module-" fastrevert-version
                                         module-file-suffix)
                                 fastrevert-test-lisp-directory)
               dir)
    (let ((form '(progn
                   (require 'fastrevert)
                   (condition-case err (fastrevert--mod-version)
                     (error (princ (format "error %S %s\n" (car err)
                                           (error-message-string err)))))
                   (princ (format "module %S\n" (featurep 'fastrevert-module))))))
      (let ((result (fastrevert-test-batch-emacs (list dir) form)))
        (should (= (car result) 0))
        (should (string-match-p "^error fastrevert-module-missing .*fastrevert-module-99\\.0\\.0"
                                (cdr result)))
        (should (string-match-p "^module nil$" (cdr result))))
      ;; A module under the wrong name is found, loaded, and refused: it
      ;; cannot be unloaded, so the message asks for a restart.
      (rename-file (expand-file-name (concat "fastrevert-module-" fastrevert-version
                                             module-file-suffix)
                                     dir)
                   (expand-file-name (concat "fastrevert-module-99.0.0" module-file-suffix) dir))
      (let ((result (fastrevert-test-batch-emacs (list dir) form)))
        (should (= (car result) 0))
        (should (string-match-p
                 (format "^error fastrevert-module-version-mismatch .*module of fastrevert %s.*restart Emacs"
                         (regexp-quote fastrevert-version))
                 (cdr result)))))))

(ert-deftest fastrevert-module-file-names-a-prebuilt-module-and-nothing-is-built ()
  "A distribution's module, named by `fastrevert-module-file', is the one loaded."
  (fastrevert-test-with-temp-dir dir
    (let ((lisp (expand-file-name "lisp/" dir))
          (prebuilt (expand-file-name "lib/fastrevert-native.so" dir)))
      (make-directory lisp)
      (make-directory (file-name-directory prebuilt))
      (fastrevert-module-test--lisp-copy lisp)
      (copy-file (expand-file-name (concat "fastrevert-module-" fastrevert-version
                                           module-file-suffix)
                                   fastrevert-test-lisp-directory)
                 prebuilt)
      (let* ((form (lambda (file)
                     `(progn
                        (setq fastrevert-module-file ,file
                              fastrevert-always-compile-module t)
                        (require 'fastrevert)
                        (condition-case err (fastrevert-mode 1)
                          (error (princ (format "error %s\n" (error-message-string err)))))
                        (princ (format "mode %S module %s built %S\n" fastrevert-mode
                                       fastrevert--module-loaded-file
                                       (and (get-buffer "*fastrevert-module-compile*") t))))))
             (result (fastrevert-test-batch-emacs (list lisp) (funcall form prebuilt))))
        (should (= (car result) 0))
        (should (string-match-p (format "^mode t module %s built nil$" (regexp-quote prebuilt))
                                (cdr result)))
        ;; One that is not there is an error, and nothing is built instead.
        (setq result (fastrevert-test-batch-emacs
                      (list lisp) (funcall form (expand-file-name "lib/gone.so" dir))))
        (should (= (car result) 0))
        (should (string-match-p "^error `fastrevert-module-file' names .*gone\\.so, which does not exist"
                                (cdr result)))
        (should (string-match-p "^mode nil module nil built nil$" (cdr result)))))))

;;;; Records

(defun fastrevert-module-test--record-kind-names ()
  "Return the names of the native enum `RecordKind', in order, as symbols.
They are read from the module's sources, with `_' written `-'."
  (with-temp-buffer
    (let ((found nil))
      (dolist (file (directory-files-recursively
                     (expand-file-name "module/" fastrevert-test-root) "\\.h\\'"))
        (unless found
          (erase-buffer)
          (insert-file-contents file)
          (setq found (re-search-forward "enum class RecordKind[^{]*{\\([^}]*\\)}" nil t))))
      (should found)
      (let ((body (replace-regexp-in-string "//[^\n]*" "" (match-string 1))))
        (mapcar (lambda (name) (intern (replace-regexp-in-string "_" "-" name)))
                (split-string body "[ \t\n,]+" t))))))

(ert-deftest fastrevert-module-record-kinds-mirror-the-native-enum ()
  "Lisp names each record kind at the index of its value in the C++ enum."
  (should (equal (append fastrevert--record-kinds nil)
                 (fastrevert-module-test--record-kind-names))))

(ert-deftest fastrevert-module-names-how-it-watches-directories ()
  "The module says which backend watches directories, and whether it sees writes."
  (let ((backend (fastrevert--mod-watch-backend)))
    (should (member (plist-get backend :name) '("inotify" "libuv")))
    ;; inotify sees writes to the files of a watched directory, and so
    ;; does libuv on Linux and macOS, where it uses inotify and FSEvents;
    ;; only kqueue's directory watches, on the BSDs, do not.
    (should (eq (plist-get backend :sees-file-writes)
                (and (memq system-type '(gnu/linux darwin)) t)))))

;;;; The module boundary

(ert-deftest fastrevert-module-wrong-type-signals-wrong-type-argument ()
  (fastrevert--engine-ensure)
  (should (equal (should-error (fastrevert--mod-echo "one" "payload")
                               :type 'wrong-type-argument)
                 '(wrong-type-argument integerp "one")))
  (should (equal (should-error (fastrevert--mod-echo 1 'not-a-string)
                               :type 'wrong-type-argument)
                 '(wrong-type-argument stringp not-a-string)))
  (should-error (fastrevert--mod-test-throw 17) :type 'wrong-type-argument))

(ert-deftest fastrevert-module-cxx-exceptions-become-lisp-signals ()
  (should (equal (should-error (fastrevert--mod-test-throw 'runtime) :type 'fastrevert-error)
                 '(fastrevert-error "test exception")))
  (should (equal (should-error (fastrevert--mod-test-throw 'system)
                               :type 'fastrevert-system-error)
                 '(fastrevert-system-error "open" "No such file or directory"
                                           "/nonexistent/fastrevert")))
  ;; Running out of memory raises what Emacs itself raises then.
  (should (equal (should-error (fastrevert--mod-test-throw 'bad-alloc))
                 memory-signal-data))
  (should-error (fastrevert--mod-test-throw 'other) :type 'fastrevert-error)
  ;; The system error is a child of the root error.
  (should (memq 'fastrevert-error (get 'fastrevert-system-error 'error-conditions))))

(ert-deftest fastrevert-module-functions-signal-when-engine-stopped ()
  (fastrevert--engine-stop)
  (should-error (fastrevert--mod-echo 1 "x") :type 'fastrevert-not-running)
  (should (eq 0 (fastrevert--mod-drain #'ignore)))
  (should-not (fastrevert--mod-stats)))

;;;; The engine round trip

(defvar fastrevert-module-test--echoes nil
  "Echo results received, newest first.")

(defun fastrevert-module-test--collect (id _code data)
  "Record the echo result ID with DATA."
  (push (cons id data) fastrevert-module-test--echoes))

(defmacro fastrevert-module-test--with-echo-handler (handler &rest body)
  "Run BODY with HANDLER receiving echo results and a running engine."
  (declare (indent 1))
  `(let ((fastrevert--record-handlers (cons (cons 'echo ,handler) fastrevert--record-handlers))
         (fastrevert-module-test--echoes nil))
     (fastrevert--engine-ensure)
     ,@body))

(ert-deftest fastrevert-module-round-trip-through-channel ()
  "A command posted to the engine comes back through the wake pipe."
  (fastrevert-module-test--with-echo-handler #'fastrevert-module-test--collect
    (fastrevert--mod-echo 42 "héllo wörld")
    (should (fastrevert-test-wait-for (lambda () fastrevert-module-test--echoes)))
    (should (equal fastrevert-module-test--echoes '((42 . "héllo wörld"))))))

(ert-deftest fastrevert-module-results-arrive-in-order-and-complete ()
  (fastrevert-module-test--with-echo-handler #'fastrevert-module-test--collect
    (dotimes (i 5000) (fastrevert--mod-echo i (number-to-string i)))
    (should (fastrevert-test-wait-for
             (lambda () (= (length fastrevert-module-test--echoes) 5000))))
    (should (equal (mapcar #'car (reverse fastrevert-module-test--echoes))
                   (number-sequence 0 4999)))
    ;; Coalescing: far fewer wakes than results.
    (should (< (plist-get (fastrevert--mod-stats) :wakes) 5000))))

(ert-deftest fastrevert-module-callback-error-propagates-and-loses-nothing ()
  "An error raised by a result handler reaches the caller; later results stay queued."
  (let ((fail-on 2))
    (fastrevert-module-test--with-echo-handler
        (lambda (id code data)
          (when (eql id fail-on) (error "Handler failed on %d" id))
          (fastrevert-module-test--collect id code data))
      ;; Drain by hand, so the error reaches this test rather than the
      ;; process filter's error handler.
      (set-process-filter fastrevert--wake-process #'ignore)
      (unwind-protect
          (progn
            (dotimes (i 5) (fastrevert--mod-echo i "x"))
            (should (fastrevert-test-wait-for
                     (lambda () (>= (plist-get (fastrevert--mod-stats) :records) 5))))
            (should (equal (should-error (fastrevert--mod-drain #'fastrevert--dispatch))
                           '(error "Handler failed on 2")))
            (should (equal (mapcar #'car fastrevert-module-test--echoes) '(1 0)))
            (setq fail-on nil)
            (should (= (fastrevert--mod-drain #'fastrevert--dispatch) 2))
            (should (equal (mapcar #'car fastrevert-module-test--echoes) '(4 3 1 0))))
        (set-process-filter fastrevert--wake-process #'fastrevert--wake-filter)))))

(ert-deftest fastrevert-module-engine-restarts-repeatedly ()
  (dotimes (round 20)
    (fastrevert--engine-stop)
    (should-not (fastrevert--mod-running-p))
    (fastrevert-module-test--with-echo-handler #'fastrevert-module-test--collect
      (fastrevert--mod-echo round "again")
      (should (fastrevert-test-wait-for (lambda () fastrevert-module-test--echoes)))
      (should (equal (caar fastrevert-module-test--echoes) round))))
  (should (memq #'fastrevert--engine-stop-at-exit kill-emacs-hook)))

(ert-deftest fastrevert-module-engine-recovers-when-wake-process-is-deleted ()
  (fastrevert-module-test--with-echo-handler #'fastrevert-module-test--collect
    (let ((old fastrevert--wake-process))
      ;; A result waits undrained as the pipe goes.
      (set-process-filter old #'ignore)
      (fastrevert--mod-echo 4 "waiting")
      (should (fastrevert--mod-wait 10))
      (delete-process old)
      ;; A new wake process took its place at once, and the engine ran on.
      (should (fastrevert--engine-live-p))
      (should-not (eq fastrevert--wake-process old))
      (fastrevert--mod-echo 5 "back")
      (should (fastrevert-test-wait-for
               (lambda () (= (length fastrevert-module-test--echoes) 2))))
      (should (equal (reverse fastrevert-module-test--echoes) '((4 . "waiting") (5 . "back"))))
      ;; Deleted while nothing else runs, it is noticed by the next user.
      (let ((fastrevert--wake-process fastrevert--wake-process))
        (set-process-sentinel fastrevert--wake-process #'ignore)
        (delete-process fastrevert--wake-process))
      (fastrevert--engine-ensure)
      (fastrevert--mod-echo 6 "again")
      (should (fastrevert-test-wait-for
               (lambda () (= (length fastrevert-module-test--echoes) 3)))))))

(ert-deftest fastrevert-module-stats-have-the-documented-keys ()
  (fastrevert--engine-ensure)
  (let ((stats (fastrevert-stats)))
    (dolist (key '(:watches :polled-files :kernel-events :events-dropped-natively
                   :batches :reverts :overflows :main-thread-ms :processes :bytes-read))
      (should (numberp (plist-get stats key))))))

(provide 'fastrevert-module-test)

;;; fastrevert-module-test.el ends here
