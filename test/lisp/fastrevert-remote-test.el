;;; fastrevert-remote-test.el --- Remote buffers revert through one watcher per connection -*- lexical-binding: t; -*-

;;; Commentary:

;; Remote files on an sshd of the tests' own (see
;; fastrevert-remote-helpers.el), reached through Tramp with no added
;; delay; the host has inotifywait.  The tests with a 50 ms round trip
;; are in fastrevert-remote-delay-test.el, those of the shell loop in
;; fastrevert-remote-poll-test.el, and those of faults in
;; fastrevert-remote-fault-test.el.

;;; Code:

(require 'fastrevert-remote-helpers)
(require 'dired)

(defvar fastrevert-remote-test--dir nil
  "The directory of this file's test files, local to the \"remote\" host.")

(defun fastrevert-remote-test--ensure ()
  "Start this file's sshd once, and give each test an empty directory."
  (unless fastrevert-remote-test--sshd
    (fastrevert-remote-test-sshd-start)
    (add-hook 'kill-emacs-hook #'fastrevert-remote-test-sshd-stop))
  (setq fastrevert-remote-test--dir
        (file-name-as-directory (make-temp-file "fastrevert-remote-" t))))

(defmacro fastrevert-remote-test--with-mode (&rest body)
  "Run BODY with `fastrevert-mode' and `global-auto-revert-mode' on, then clean up."
  (declare (indent 0))
  `(progn
     (fastrevert-remote-test--ensure)
     (let ((auto-revert-remote-files t)
           (auto-revert-verbose nil)
           (auto-revert-use-notify t)
           (auto-revert-interval 5)
           (auto-revert-notify-exclude-dir-regexp "^$")
           (auto-revert-stop-on-user-input t))
       (unwind-protect
           (progn
             (fastrevert-mode 1)
             (global-auto-revert-mode 1)
             ,@body)
         (fastrevert-remote-test-cleanup)
         (delete-directory fastrevert-remote-test--dir t)))))

(defun fastrevert-remote-test--local (name)
  "Return the local name of NAME in this test's directory."
  (expand-file-name name fastrevert-remote-test--dir))

(defun fastrevert-remote-test--open (host name &optional text)
  "Write TEXT (if given) to NAME and visit it on HOST; return the buffer."
  (when text (fastrevert-remote-test-write (fastrevert-remote-test--local name) text))
  (find-file-noselect (fastrevert-remote-test-file host (fastrevert-remote-test--local name))))

;;;; One watcher per connection

(ert-deftest fastrevert-remote-one-watcher-serves-every-buffer-of-a-connection ()
  "Twelve buffers on two connections make two watchers, and every change shows."
  (fastrevert-remote-test--with-mode
    (let* ((started (plist-get (fastrevert-remote-stats) :remote-watchers-started))
           (buffers (append (cl-loop for i below 10 collect
                                    (fastrevert-remote-test--open "fr1" (format "a%d" i) "old\n"))
                           (cl-loop for i below 2 collect
                                    (fastrevert-remote-test--open "fr2" (format "b%d" i) "old\n")))))
      (should (fastrevert-test-wait-for (lambda () (and (fastrevert-remote-test-running-p "fr1")
                                                        (fastrevert-remote-test-running-p "fr2")))
                                        30))
      (fastrevert-remote-test-wait-settled buffers)
      (should (= 2 (length (fastrevert-remote-test-watchers))))
      (should (equal (fastrevert-remote-test-watching "fr1") "inotifywait"))
      ;; Stock watches each buffer with a notification process of its own
      ;; through Tramp; here no buffer has a file-notify watch.
      (should (zerop (hash-table-count file-notify-descriptors)))
      (dolist (buffer buffers)
        (should (fastrevert-remote--descriptor-p
                 (buffer-local-value 'auto-revert-notify-watch-descriptor buffer))))
      (dotimes (i 10)
        (fastrevert-remote-test-write (fastrevert-remote-test--local (format "a%d" i)) "new\n"))
      (dotimes (i 2)
        (fastrevert-remote-test-write (fastrevert-remote-test--local (format "b%d" i)) "new\n"))
      (should (fastrevert-test-wait-for
               (lambda () (cl-every (lambda (buffer)
                                      (equal (fastrevert-remote-test-text buffer) "new\n"))
                                    buffers))
               20))
      (should (= (+ started 2) (plist-get (fastrevert-remote-stats) :remote-watchers-started))))))

(ert-deftest fastrevert-remote-watched-set-changes-without-a-new-login ()
  "Opening and killing buffers tells the running watcher; no other is started."
  (fastrevert-remote-test--with-mode
    (let ((first (fastrevert-remote-test--open "fr1" "first" "1\n")))
      (should (fastrevert-test-wait-for (lambda () (fastrevert-remote-test-running-p "fr1")) 30))
      (let ((watcher (car (fastrevert-remote-test-watchers)))
            (started (plist-get (fastrevert-remote-stats) :remote-watchers-started)))
        (make-directory (fastrevert-remote-test--local "sub"))
        (let ((second (fastrevert-remote-test--open "fr1" "sub/second" "2\n")))
          (kill-buffer first)
          (fastrevert-remote-test-wait-settled (list second))
          (fastrevert-remote-test-write (fastrevert-remote-test--local "sub/second") "changed\n")
          (should (fastrevert-test-wait-for
                   (lambda () (equal (fastrevert-remote-test-text second) "changed\n"))
                   10))
          (should (eq watcher (car (fastrevert-remote-test-watchers))))
          (should (= started (plist-get (fastrevert-remote-stats) :remote-watchers-started)))
          ;; The last buffer gone, the watcher goes too.
          (kill-buffer second)
          (should (fastrevert-test-wait-for (lambda () (null (fastrevert-remote-test-watchers)))
                                            10)))))))

;;;; Reverting as stock does

(ert-deftest fastrevert-remote-never-reverts-a-modified-buffer ()
  "A buffer with unsaved edits keeps them when its remote file changes."
  (fastrevert-remote-test--with-mode
    (let ((buffer (fastrevert-remote-test--open "fr1" "edited" "disk\n")))
      (fastrevert-remote-test-wait-settled (list buffer))
      (with-current-buffer buffer
        (goto-char (point-max))
        (insert "mine\n"))
      (fastrevert-remote-test-write (fastrevert-remote-test--local "edited") "theirs\n")
      ;; The watcher's line has come and the buffer has been checked.
      (should (fastrevert-test-wait-for
               (lambda () (equal (fastrevert-remote-test-item-size buffer) "7"))
               10))
      (fastrevert-remote-test-wait-checked)
      (should (equal (fastrevert-remote-test-text buffer) "disk\nmine\n"))
      (should (buffer-modified-p buffer))
      ;; Once the edits are undone, as when saved elsewhere, a later change reverts.
      (with-current-buffer buffer (set-buffer-modified-p nil))
      (fastrevert-remote-test-write (fastrevert-remote-test--local "edited") "theirs again\n")
      (should (fastrevert-test-wait-for
               (lambda () (equal (fastrevert-remote-test-text buffer) "theirs again\n"))
               10)))))

(ert-deftest fastrevert-remote-half-written-file-is-never-the-last-reverted ()
  "A file written in pieces ends up whole in its buffer, however the reverts fall."
  (fastrevert-remote-test--with-mode
    (let ((buffer (fastrevert-remote-test--open "fr1" "pieces" "start\n"))
          (file (fastrevert-remote-test--local "pieces")))
      (fastrevert-remote-test-wait-settled (list buffer))
      (dotimes (round 5)
        (let ((text (mapconcat (lambda (i) (format "round %d line %d\n" round i))
                               (number-sequence 1 200) "")))
          ;; The first half, then the rest a moment later, as a slow writer.
          (fastrevert-remote-test-write file (substring text 0 (/ (length text) 2)))
          (sleep-for 0.03)
          (fastrevert-remote-test-write file (substring text (/ (length text) 2)) t)
          (should (fastrevert-test-wait-for
                   (lambda () (equal (fastrevert-remote-test-text buffer) text))
                   10)))))))

(ert-deftest fastrevert-remote-save-here-is-not-reverted-back ()
  "A buffer saved through Tramp is not reverted by its own write."
  (fastrevert-remote-test--with-mode
    (let ((buffer (fastrevert-remote-test--open "fr1" "saved" "one\n")))
      (fastrevert-remote-test-wait-settled (list buffer))
      (let ((reverts (plist-get (fastrevert-remote-stats) :remote-reverts)))
        (with-current-buffer buffer
          (erase-buffer)
          (insert "two\n")
          (save-buffer))
        (should (fastrevert-test-wait-for
                 (lambda () (equal (fastrevert-remote-test-item-size buffer) "4"))
                 10))
        (fastrevert-remote-test-wait-checked)
        (should (= reverts (plist-get (fastrevert-remote-stats) :remote-reverts)))
        (should-not (buffer-modified-p buffer))))))

(ert-deftest fastrevert-remote-dired-buffer-lists-a-new-file ()
  "A remote Dired buffer shows a file created on the host."
  (fastrevert-remote-test--with-mode
    (let ((global-auto-revert-non-file-buffers t))
      (fastrevert-remote-test-write (fastrevert-remote-test--local "present") "x\n")
      (let ((buffer (dired-noselect (fastrevert-remote-test-file "fr1" fastrevert-remote-test--dir))))
        (should (fastrevert-remote--descriptor-p
                 (buffer-local-value 'auto-revert-notify-watch-descriptor buffer)))
        (fastrevert-remote-test-wait-settled (list buffer))
        (fastrevert-remote-test-write (fastrevert-remote-test--local "appeared") "y\n")
        (should (fastrevert-test-wait-for
                 (lambda () (with-current-buffer buffer
                              (save-excursion
                                (goto-char (point-min))
                                (search-forward "appeared" nil t))))
                 15))))))

(ert-deftest fastrevert-remote-tail-mode-follows-a-log-with-nothing-lost-or-doubled ()
  "A log written at 100 lines a second is followed line for line."
  (fastrevert-remote-test--with-mode
    (let* ((file (fastrevert-remote-test--local "app.log"))
           (buffer (fastrevert-remote-test--open "fr1" "app.log" "first\n")))
      (with-current-buffer buffer (auto-revert-tail-mode 1))
      (fastrevert-remote-test-wait-settled (list buffer))
      (fastrevert-remote-test-log-lines file 300 0.01)
      (let ((expected (with-temp-buffer
                        (insert-file-contents file)
                        (buffer-string))))
        (should (fastrevert-test-wait-for
                 (lambda () (equal (fastrevert-remote-test-text buffer) expected))
                 15))
        (should (string-match-p "line 299\n\\'" expected))))))

;;;; Left to stock

(ert-deftest fastrevert-remote-polls-where-stock-would-not-be-notified ()
  "With `auto-revert-use-notify' nil the watcher stats, as stock would poll."
  (fastrevert-remote-test--with-mode
    (let* ((auto-revert-use-notify nil)
           (buffer (fastrevert-remote-test--open "fr1" "polled" "x\n")))
      (fastrevert-remote-test-wait-settled (list buffer))
      (should (equal (fastrevert-remote-test-watching "fr1") "poll")))))

(ert-deftest fastrevert-remote-leaves-buffers-to-stock-when-remote-files-are-off ()
  "With `auto-revert-remote-files' nil, no watcher starts, as stock starts none."
  (fastrevert-remote-test--with-mode
    (let* ((auto-revert-remote-files nil)
           (buffer (fastrevert-remote-test--open "fr1" "plain" "x\n")))
      (should-not (fastrevert-remote--descriptor-p
                   (buffer-local-value 'auto-revert-notify-watch-descriptor buffer)))
      (sleep-for 0.2)
      (should (null (fastrevert-remote-test-watchers))))))

(ert-deftest fastrevert-remote-leaves-methods-without-processes-to-stock ()
  "ftp and smb files are not watched here; ssh, scp, sudo and docker files are."
  (require 'tramp-ftp)
  (require 'tramp-smb)
  (should-not (fastrevert-remote--supported-p "/ftp:user@host.example:/file"))
  (should-not (fastrevert-remote--supported-p "/smb:user@host.example:/share/file"))
  (should (fastrevert-remote--supported-p "/ssh:user@host.example:/file"))
  (should (fastrevert-remote--supported-p "/scp:host.example:/file"))
  (should (fastrevert-remote--supported-p "/sudo::/etc/hosts")))

(ert-deftest fastrevert-remote-mode-off-stops-every-watcher ()
  "Turning `fastrevert-mode' off ends the watchers and gives the buffers back."
  (fastrevert-remote-test--with-mode
    (let ((buffer (fastrevert-remote-test--open "fr1" "back" "x\n")))
      (should (fastrevert-test-wait-for (lambda () (fastrevert-remote-test-running-p "fr1")) 30))
      (let ((auto-revert-use-notify nil))
        (fastrevert-mode -1))
      (should (null (fastrevert-remote-test-watchers)))
      (should-not (fastrevert-remote--descriptor-p
                   (buffer-local-value 'auto-revert-notify-watch-descriptor buffer))))))

;;;; Cost

(ert-deftest fastrevert-remote-idle-connection-costs-no-tramp-call ()
  "With nothing changing, no Tramp call is made and no line is handled."
  (fastrevert-remote-test--with-mode
    (let ((buffers (cl-loop for i below 10 collect
                            (fastrevert-remote-test--open "fr1" (format "i%d" i) "x\n"))))
      (fastrevert-remote-test-wait-settled buffers)
      (let ((calls (fastrevert-remote-test-count-tramp-calls
                    (lambda () (fastrevert-remote-test-idle 3)))))
        (should (equal calls 0))))))

(provide 'fastrevert-remote-test)

;;; fastrevert-remote-test.el ends here
