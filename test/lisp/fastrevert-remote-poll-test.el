;;; fastrevert-remote-poll-test.el --- Remote buffers on a host without inotifywait -*- lexical-binding: t; -*-

;;; Commentary:

;; The sshd of these tests gives its sessions a PATH without inotifywait
;; and fswatch (see `fastrevert-remote-test-sshd-start'), so that the
;; watcher falls back to its shell loop, which stats the watched files
;; every `auto-revert-interval' and prints only those that changed.
;; The host is reached through the tests' relay, which holds each chunk
;; 25 ms each way: a 50 ms round trip.

;;; Code:

(require 'fastrevert-remote-helpers)

(defun fastrevert-remote-poll-test--open (count)
  "Write and visit COUNT files; return ((BUFFER . LOCAL-FILE) ...)."
  (cl-loop for i below count
           collect (let ((file (fastrevert-remote-test--local (format "p%d" i))))
                     (fastrevert-remote-test-write file "start\n")
                     (cons (find-file-noselect (fastrevert-remote-test-file "frd1" file)) file))))

(ert-deftest fastrevert-remote-poll-write-reaches-its-buffer-within-the-interval-and-a-half-second ()
  "Without inotifywait, a write shows within the interval and 0.5 s (P90).
Ten buffers on one connection at a 50 ms round trip: the shell loop
stats every second, so a write waits up to a second for its line, then
a revert through Tramp."
  (let ((seed (fastrevert-remote-test-seed)))
    (ert-info ((format "FASTREVERT_TEST_SEED=%s" seed))
      (fastrevert-remote-test--with-mode
        :without-notifiers t :relay-delay 25 :interval 1
        (let ((pairs (fastrevert-remote-poll-test--open 10)))
          (fastrevert-remote-test-wait-settled (mapcar #'car pairs))
          (should (equal (fastrevert-remote-test-watching "frd1") "poll"))
          (let ((latencies (fastrevert-remote-test-latencies pairs 10 0.2)))
            (message "Write to buffer, shell loop at a 1 s interval, 50 ms round trip: %s s"
                     (mapconcat (lambda (s) (format "%.2f" s)) latencies " "))
            (ert-info ((format "latencies %S" latencies))
              (should (<= (fastrevert-remote-test-p90 latencies)
                          (+ auto-revert-interval 0.5))))))))))

(ert-deftest fastrevert-remote-poll-prints-only-what-changed ()
  "The shell loop stats every second, but an unchanged file makes no line."
  (fastrevert-remote-test--with-mode
    :without-notifiers t :relay-delay 25 :interval 1
    (let ((pairs (fastrevert-remote-poll-test--open 5)))
      (fastrevert-remote-test-wait-settled (mapcar #'car pairs))
      (let ((lines (plist-get (fastrevert-remote-stats) :remote-lines))
            (trips (fastrevert-remote-test-round-trips
                    (lambda () (fastrevert-remote-test-idle 3.5)))))
        (should (equal trips '(0 . 0)))
        (should (= lines (plist-get (fastrevert-remote-stats) :remote-lines))))
      ;; And one that changed makes one.
      (fastrevert-remote-test-write (cdar pairs) "changed\n")
      (should (fastrevert-test-wait-for
               (lambda () (equal (fastrevert-remote-test-text (caar pairs)) "changed\n"))
               10)))))

;; With `auto-revert-use-notify' nil, the configuration Tramp's manual
;; advises for remote files, stock walks every buffer at each tick of its
;; timer and asks the host about each one.  Here the watcher's loop
;; stats on the host, and the main thread has nothing to do at a tick:
;; no timer of stock's runs (none is left to poll), and the loop prints
;; nothing while nothing changes.

(ert-deftest fastrevert-remote-poll-with-notify-off-costs-the-idle-main-thread-nothing ()
  "With `auto-revert-use-notify' nil, idle remote buffers cost the main thread nothing.
Ten buffers on one connection at a 50 ms round trip, at stock's 5 s
interval: over five idle seconds, which take in a tick of the loop on
the host, the main thread spends at most 5 ms and reaches Tramp not
once, and no 50 ms wait that follows is busy for more than 5 ms."
  (fastrevert-remote-test--with-mode
    :without-notifiers t :relay-delay 25
    (let ((auto-revert-use-notify nil))
      (let ((pairs (fastrevert-remote-poll-test--open 10)))
        (fastrevert-remote-test-wait-settled (mapcar #'car pairs))
        (should (equal (fastrevert-remote-test-watching "frd1") "poll"))
        ;; Nothing is left to stock's polling.
        (should-not (timerp auto-revert-timer))
        (let* ((spent nil)
               (stalls nil)
               (trips (fastrevert-remote-test-round-trips
                       (lambda ()
                         (let ((start (fastrevert-test-main-thread-seconds)))
                           (sleep-for 5)
                           (setq spent (- (fastrevert-test-main-thread-seconds) start)))
                         (setq stalls (fastrevert-remote-test-stalls 5))))))
          (ert-info ((format "main thread %.2f ms in 5 idle s; stalls (late . busy) %S s"
                             (* 1000 spent) stalls))
            (should (equal trips '(0 . 0)))
            (should (<= spent 0.005))
            (should (<= (cdr stalls) 0.005))))))))

(ert-deftest fastrevert-remote-poll-follows-a-log-in-tail-mode ()
  "The shell loop's tail-mode buffer gets every line once."
  (fastrevert-remote-test--with-mode
    :without-notifiers t :relay-delay 25 :interval 1
    (let* ((file (fastrevert-remote-test--local "poll.log"))
           (buffer (progn (fastrevert-remote-test-write file "begin\n")
                          (find-file-noselect (fastrevert-remote-test-file "frd1" file)))))
      (with-current-buffer buffer (auto-revert-tail-mode 1))
      (fastrevert-remote-test-wait-settled (list buffer))
      (fastrevert-remote-test-log-lines file 200 0.01)
      (let ((expected (with-temp-buffer (insert-file-contents file) (buffer-string))))
        (should (fastrevert-test-wait-for
                 (lambda () (equal (fastrevert-remote-test-text buffer) expected))
                 10))))))

(provide 'fastrevert-remote-poll-test)

;;; fastrevert-remote-poll-test.el ends here
