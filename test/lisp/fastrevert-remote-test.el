;;; fastrevert-remote-test.el --- Remote buffers revert through one watcher per connection -*- lexical-binding: t; -*-

;;; Commentary:

;; Remote files on an sshd of the tests' own (see
;; fastrevert-remote-helpers.el), reached through Tramp with no added
;; delay; the host has inotifywait.  These tests are of the watchers:
;; one per connection, and which buffers they take.  How buffers are
;; reverted is in fastrevert-remote-revert-test.el, the tests with a
;; 50 ms round trip in fastrevert-remote-delay-test.el, those of the
;; shell loop in fastrevert-remote-poll-test.el, and those of faults
;; in fastrevert-remote-fault-test.el.

;;; Code:

(require 'fastrevert-remote-helpers)

;;;; One watcher per connection

(ert-deftest fastrevert-remote-one-watcher-serves-every-buffer-of-a-connection ()
  "Eight buffers on two connections make two watchers, and every change shows."
  (fastrevert-remote-test--with-mode
    (let* ((started (plist-get (fastrevert-remote-stats) :remote-watchers-started))
           (buffers (append (cl-loop for i below 6 collect
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
      (dotimes (i 6)
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

(ert-deftest fastrevert-remote-watcher-started-through-tramp-serves-its-buffers ()
  "Where ssh cannot be run over a shared connection, Tramp starts the watcher.
It runs as a remote process of Tramp's, one for the connection, and
the copies of changed files come through it as well."
  (fastrevert-remote-test--with-mode
    (let* ((fastrevert-remote-direct nil)
           (buffers (cl-loop for i below 3 collect
                             (fastrevert-remote-test--open "fr3" (format "t%d" i) "old\n"))))
      (fastrevert-remote-test-wait-settled buffers)
      (let ((watchers (fastrevert-remote-test-watchers)))
        (should (= 1 (length watchers)))
        (should (processp (car watchers)))
        (should-not (fastrevert-process-p (car watchers))))
      (let ((trips (fastrevert-remote-test-round-trips
                    (lambda ()
                      (dotimes (i 3)
                        (fastrevert-remote-test-write
                         (fastrevert-remote-test--local (format "t%d" i)) "new\n"))
                      (should (fastrevert-test-wait-for
                               (lambda () (cl-every (lambda (buffer)
                                                      (equal (fastrevert-remote-test-text buffer)
                                                             "new\n"))
                                                    buffers))
                               20))))))
        (should (= 0 (car trips)))))))

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
  "ftp, smb and dav files are not watched here; ssh, scp, rsync and sudo files are."
  (require 'tramp-ftp)
  (require 'tramp-smb)
  (ignore-errors (require 'tramp-gvfs))
  (should-not (fastrevert-remote--supported-p "/ftp:user@host.example:/file"))
  (should-not (fastrevert-remote--supported-p "/smb:user@host.example:/share/file"))
  (should-not (fastrevert-remote--supported-p "/dav:user@host.example:/file"))
  (should-not (fastrevert-remote--supported-p "/davs:user@host.example:/file"))
  (should (fastrevert-remote--supported-p "/ssh:user@host.example:/file"))
  (should (fastrevert-remote--supported-p "/scp:host.example:/file"))
  (should (fastrevert-remote--supported-p "/sudo::/etc/hosts"))
  (should (fastrevert-remote--supported-p "/rsync:host.example:/file")))

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
    (let ((buffers (cl-loop for i below 5 collect
                            (fastrevert-remote-test--open "fr1" (format "i%d" i) "x\n"))))
      (fastrevert-remote-test-wait-settled buffers)
      (let ((calls (fastrevert-remote-test-count-tramp-calls
                    (lambda () (fastrevert-remote-test-idle 3)))))
        (should (equal calls 0))))))

(provide 'fastrevert-remote-test)

;;; fastrevert-remote-test.el ends here
