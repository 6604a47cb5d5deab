;;; fastrevert-remote-delay-test.el --- Remote buffers at a 50 ms round trip -*- lexical-binding: t; -*-

;;; Commentary:

;; The remote host of fastrevert-remote-test.el, reached through the
;; tests' relay, which holds each chunk 25 ms each way: a 50 ms round
;; trip.  Stock auto-revert freezes Emacs for seconds there; these
;; tests hold fastrevert to what the users of such a link need.
;;
;; Times measured here are bounded generously, for the machines that
;; run the tests are busy: what is asserted exactly is what cannot
;; depend on load, the round trips made through Tramp on the main
;; thread.  The precise figures are in the benchmark (make bench-full).

;;; Code:

(require 'fastrevert-remote-helpers)

(ert-deftest fastrevert-remote-delay-ten-buffers-cost-no-round-trip-and-revert-within-a-second ()
  "Ten buffers on one connection at 50 ms: idle costs nothing; writes show fast.
After the files are open, nothing reaches Tramp while no file changes,
and the main thread spends next to no time on them; a change reaches its
buffer in under a second at the 90th percentile, its revert making
no round trip (only the VC refresh after it does, as stock's does)."
  (let ((seed (fastrevert-remote-test-seed)))
    (ert-info ((format "FASTREVERT_TEST_SEED=%s" seed))
      (fastrevert-remote-test--with-mode
        :relay-delay 25
        (let* ((pairs (cl-loop for i below 10
                               collect (let ((file (fastrevert-remote-test--local
                                                    (format "f%d" i))))
                                         (fastrevert-remote-test-write file "start\n")
                                         (cons (find-file-noselect
                                                (fastrevert-remote-test-file "frd1" file))
                                               file))))
               (buffers (mapcar #'car pairs)))
          (fastrevert-remote-test-wait-settled buffers)
          (should (= 1 (length (fastrevert-remote-test-watchers))))
          ;; Idle: no round trip, no wait busy for over 50 ms, and at
          ;; most 1 ms/s in fastrevert's handlers.
          (let* ((before (fastrevert-remote-test-main-thread-ms))
                 (stalls nil)
                 (trips (fastrevert-remote-test-round-trips
                         (lambda () (setq stalls (fastrevert-remote-test-stalls 5))))))
            (ert-info ((format "stalls (late . busy) %S s" stalls))
              (should (equal trips '(0 . 0)))
              (should (<= (cdr stalls) 0.05))
              (should (<= (- (fastrevert-remote-test-main-thread-ms) before) 5.0))))
          ;; Changes: each reaches its buffer fast, without a round trip
          ;; of its own.
          (let* ((latencies nil)
                 (trips (fastrevert-remote-test-round-trips
                         (lambda ()
                           (setq latencies (fastrevert-remote-test-latencies pairs 10 1.0))))))
            (message "Write to buffer at 50 ms round trip: %s s; round trips (own . VC) %S"
                     (mapconcat (lambda (s) (format "%.2f" s)) latencies " ") trips)
            (ert-info ((format "latencies %S, round trips %S" latencies trips))
              (should (= 0 (car trips)))
              (should (<= (fastrevert-remote-test-p90 latencies) 1.0)))))))))

(ert-deftest fastrevert-remote-delay-tail-mode-follows-a-log-at-100-lines-a-second ()
  "A log followed in tail mode through a 50 ms round trip loses and doubles nothing."
  (fastrevert-remote-test--with-mode
    :relay-delay 25
    (let* ((file (fastrevert-remote-test--local "build.log"))
           (buffer (progn (fastrevert-remote-test-write file "begin\n")
                          (find-file-noselect (fastrevert-remote-test-file "frd1" file)))))
      (with-current-buffer buffer (auto-revert-tail-mode 1))
      (fastrevert-remote-test-wait-settled (list buffer))
      (let ((trips (fastrevert-remote-test-round-trips
                    (lambda ()
                      (fastrevert-remote-test-log-lines file 300 0.01)
                      (let ((expected (with-temp-buffer
                                        (insert-file-contents file)
                                        (buffer-string))))
                        (should (string-match-p "\\`begin\nline 0\n\\(?:.*\n\\)*line 299\n\\'"
                                                expected))
                        (should (fastrevert-test-wait-for
                                 (lambda () (equal (fastrevert-remote-test-text buffer) expected))
                                 20)))))))
        (ert-info ((format "round trips %S" trips))
          (should (= 0 (car trips))))))))

(provide 'fastrevert-remote-delay-test)

;;; fastrevert-remote-delay-test.el ends here
