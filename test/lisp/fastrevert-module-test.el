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
  (should (featurep 'fastrevert-module))
  (should (equal (fastrevert--mod-version) fastrevert-version))
  (should (equal (lm-version (expand-file-name "lisp/fastrevert.el" fastrevert-test-root))
                 fastrevert-version)))

(ert-deftest fastrevert-module-version-mismatch-is-refused ()
  (let ((err (should-error (fastrevert--check-module-version "0.0.0-other")
                           :type 'fastrevert-module-version-mismatch)))
    (should (string-match-p "rebuild" (cadr err))))
  (should (null (fastrevert--check-module-version fastrevert-version))))

(ert-deftest fastrevert-module-require-fails-on-stale-module ()
  "A module built for another version makes `require' fail with advice."
  (fastrevert-test-with-temp-dir dir
    (let ((lisp (expand-file-name "lisp/" fastrevert-test-root)))
      (dolist (file (directory-files lisp t "\\.el\\'"))
        (copy-file file dir))
      (copy-file (expand-file-name (concat "fastrevert-module" module-file-suffix)
                                   fastrevert-test-lisp-directory)
                 dir)
      ;; The Lisp of another version: its version string, wherever it is.
      (dolist (file (directory-files dir t "\\.el\\'"))
        (with-temp-file file
          (insert-file-contents file)
          (goto-char (point-min))
          (while (search-forward (concat "\"" fastrevert-version "\"") nil t)
            (replace-match "\"99.0.0\"" t t))))
      (let ((result (fastrevert-test-batch-emacs
                     (list dir)
                     '(condition-case err (progn (require 'fastrevert) (princ "loaded"))
                        (error (princ (format "%S" err)) (kill-emacs 3))))))
        (should (= (car result) 3))
        (should (string-match-p "fastrevert-module-version-mismatch" (cdr result)))
        (should (string-match-p "rebuild" (cdr result)))))))

(ert-deftest fastrevert-module-require-without-module-explains-how-to-build ()
  (fastrevert-test-with-temp-dir dir
    (dolist (file (directory-files (expand-file-name "lisp/" fastrevert-test-root) t "\\.el\\'"))
      (copy-file file dir))
    (let ((result (fastrevert-test-batch-emacs
                   (list dir)
                   '(condition-case err (progn (require 'fastrevert) (princ "loaded"))
                      (error (princ (error-message-string err)) (kill-emacs 3))))))
      (should (= (car result) 3))
      (should (string-match-p "not built" (cdr result)))
      (should (string-match-p "fastrevert-module-compile" (cdr result))))))

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

(ert-deftest fastrevert-module-memfd-range-record-reads-its-newest-entry ()
  "A memfd range entry gives the memfd's size, little-endian, and the last bytes."
  (let ((older (unibyte-string 5 0 0 0 0 0 0 0 0 0 ?a ?b))
        (newer (unibyte-string 8 7 6 5 4 3 2 1 ?w ?x ?y ?z)))
    (should (= (length older) fastrevert--memfd-range-entry-size))
    (should (equal (fastrevert--memfd-range-entry older) (cons 5 (unibyte-string 0 0 ?a ?b))))
    (should (equal (fastrevert--memfd-range-entry (concat older newer))
                   (cons #x0102030405060708 "wxyz")))))

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
