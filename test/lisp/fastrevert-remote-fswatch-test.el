;;; fastrevert-remote-fswatch-test.el --- Remote buffers on a host with fswatch alone -*- lexical-binding: t; -*-

;;; Commentary:

;; The sshd of these tests gives its sessions a PATH without inotifywait
;; but with fswatch (see `fastrevert-remote-test-sshd-start'), as a
;; macOS or BSD host has: the watcher then watches the buffers'
;; directories with fswatch.

;;; Code:

(require 'fastrevert-remote-helpers)

(defun fastrevert-remote-fswatch-test--open (names)
  "Write and visit NAMES (relative to the test's directory) on fr1.
Return ((BUFFER . LOCAL-FILE) ...)."
  (mapcar (lambda (name)
            (let ((file (fastrevert-remote-test--local name)))
              (make-directory (file-name-directory file) t)
              (fastrevert-remote-test-write file "start\n")
              (cons (find-file-noselect (fastrevert-remote-test-file "fr1" file)) file)))
          names))

(ert-deftest fastrevert-remote-fswatch-write-reaches-its-buffer-within-a-second ()
  "With fswatch as the host's only notifier, a write shows within 1 s (P90).
The watcher says it watches with fswatch, and a change makes no
round trip of its own."
  (let ((seed (fastrevert-remote-test-seed)))
    (ert-info ((format "FASTREVERT_TEST_SEED=%s" seed))
      (fastrevert-remote-test--with-mode
        :without-inotifywait t
        (let ((pairs (fastrevert-remote-fswatch-test--open
                      (cl-loop for i below 5 collect (format "w%d" i)))))
          (fastrevert-remote-test-wait-settled (mapcar #'car pairs))
          (should (equal (fastrevert-remote-test-watching "fr1") "fswatch"))
          (let* ((latencies nil)
                 (trips (fastrevert-remote-test-round-trips
                         (lambda ()
                           (setq latencies (fastrevert-remote-test-latencies pairs 10 0.2))))))
            (message "Write to buffer, fswatch: %s s"
                     (mapconcat (lambda (s) (format "%.2f" s)) latencies " "))
            (ert-info ((format "latencies %S, round trips %S" latencies trips))
              (should (= 0 (car trips)))
              (should (<= (fastrevert-remote-test-p90 latencies) 1.0)))))))))

(ert-deftest fastrevert-remote-fswatch-new-directory-is-watched-without-a-new-login ()
  "A buffer in a directory not yet watched restarts fswatch, not the watcher.
A change made there right after the buffer is opened is not missed."
  (fastrevert-remote-test--with-mode
    :without-inotifywait t
    (let ((first (fastrevert-remote-fswatch-test--open '("a/one"))))
      (fastrevert-remote-test-wait-settled (mapcar #'car first))
      (should (equal (fastrevert-remote-test-watching "fr1") "fswatch"))
      (let* ((started (plist-get (fastrevert-remote-stats) :remote-watchers-started))
             (watcher (car (fastrevert-remote-test-watchers)))
             (second (fastrevert-remote-fswatch-test--open '("b/two")))
             (buffer (caar second)))
        (fastrevert-remote-test-write (cdar second) "right after\n")
        (should (fastrevert-test-wait-for
                 (lambda () (equal (fastrevert-remote-test-text buffer) "right after\n"))
                 15))
        (fastrevert-remote-test-wait-settled (list buffer))
        (fastrevert-remote-test-write (cdar second) "later\n")
        (should (fastrevert-test-wait-for
                 (lambda () (equal (fastrevert-remote-test-text buffer) "later\n"))
                 15))
        (should (eq watcher (car (fastrevert-remote-test-watchers))))
        (should (= started (plist-get (fastrevert-remote-stats) :remote-watchers-started)))))))

(ert-deftest fastrevert-remote-fswatch-follows-a-log-in-tail-mode ()
  "A log followed in tail mode through fswatch gets every line once."
  (fastrevert-remote-test--with-mode
    :without-inotifywait t
    (let* ((file (fastrevert-remote-test--local "fswatch.log"))
           (buffer (progn (fastrevert-remote-test-write file "begin\n")
                          (find-file-noselect (fastrevert-remote-test-file "fr1" file)))))
      (with-current-buffer buffer (auto-revert-tail-mode 1))
      (fastrevert-remote-test-wait-settled (list buffer))
      (fastrevert-remote-test-log-lines file 300 0.01)
      (let ((expected (with-temp-buffer (insert-file-contents file) (buffer-string))))
        (should (string-match-p "\\`begin\nline 0\n\\(?:.*\n\\)*line 299\n\\'" expected))
        (should (fastrevert-test-wait-for
                 (lambda () (equal (fastrevert-remote-test-text buffer) expected))
                 10))))))

(provide 'fastrevert-remote-fswatch-test)

;;; fastrevert-remote-fswatch-test.el ends here
