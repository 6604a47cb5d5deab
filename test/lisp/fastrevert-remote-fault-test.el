;;; fastrevert-remote-fault-test.el --- Remote watchers when the host fails -*- lexical-binding: t; -*-

;;; Commentary:

;; The sshd of the tests killed in the middle of a run, a host that
;; stops answering (the relay frozen), and the delay between tries to
;; start a watcher again.  None of it may freeze Emacs: what is asserted
;; exactly is that no round trip through Tramp is made meanwhile, for
;; one made to a host that is gone or silent blocks the main thread,
;; and that no wait of the main thread has it busy for over 50 ms.  How
;; late a wait returns is bounded loosely, for a busy machine makes
;; waits late too; the benchmark (make bench-full) has that figure.

;;; Code:

(require 'fastrevert-remote-helpers)

(defun fastrevert-remote-fault-test--open (host count)
  "Write and visit COUNT files on HOST; return ((BUFFER . LOCAL-FILE) ...)."
  (cl-loop for i below count
           collect (let ((file (fastrevert-remote-test--local (format "%s-%d" host i))))
                     (fastrevert-remote-test-write file "start\n")
                     (cons (find-file-noselect (fastrevert-remote-test-file host file)) file))))

(defun fastrevert-remote-fault-test--reports (host)
  "Return how many times *Messages* reports the end of HOST's watcher."
  (with-current-buffer (messages-buffer)
    (save-excursion
      (goto-char (point-min))
      (let ((count 0))
        (while (search-forward (format "watcher of remote files on %s ended" host) nil t)
          (setq count (1+ count)))
        count))))

(defun fastrevert-remote-fault-test--worst (a b)
  "Return the worse of the stalls A and B, each (LATE . BUSY), part by part."
  (cons (max (car a) (car b)) (max (cdr a) (cdr b))))

(defun fastrevert-remote-fault-test--stalls-until-ended ()
  "Measure the stalls until no watcher runs (at most 15 s); return them.
Fail if a watcher still runs then."
  (let ((stalls '(0.0 . 0.0))
        (deadline (+ (float-time) 15)))
    (while (and (fastrevert-remote-test-watchers) (< (float-time) deadline))
      (setq stalls (fastrevert-remote-fault-test--worst
                    stalls (fastrevert-remote-test-stalls 0.1))))
    (should-not (fastrevert-remote-test-watchers))
    stalls))

(ert-deftest fastrevert-remote-fault-sshd-killed-mid-run-is-reported-once-then-recovered ()
  "Killing the sshd ends the watcher without a round trip; it returns with Tramp.
The host is reached through the relay, a 50 ms round trip.  Until the
host is back, no wait of the main thread is busy for over 50 ms, and
fastrevert's handlers spend no more than that in all.  The end is
reported once, naming the host.  A change made while the host was gone
shows once Tramp has connected again, and so do later ones."
  (fastrevert-remote-test--with-mode
    :relay-delay 25
    (let* ((host "frd1")
           (pairs (fastrevert-remote-fault-test--open host 10))
           (buffers (mapcar #'car pairs))
           (reports (fastrevert-remote-fault-test--reports host)))
      (fastrevert-remote-test-wait-settled buffers)
      (let* ((before (fastrevert-remote-test-main-thread-ms))
             (stalls nil)
             (trips (fastrevert-remote-test-round-trips
                     (lambda ()
                       (fastrevert-remote-test-sshd-kill)
                       (setq stalls (fastrevert-remote-fault-test--stalls-until-ended))
                       (fastrevert-remote-test-write (cdar pairs) "while away\n")
                       (setq stalls (fastrevert-remote-fault-test--worst
                                     stalls (fastrevert-remote-test-stalls 3)))))))
        (ert-info ((format "round trips %S, stalls (late . busy) %S s" trips stalls))
          (should (equal trips '(0 . 0)))
          (should (< (car stalls) 1.0))
          (should (<= (cdr stalls) 0.05))
          (should (<= (- (fastrevert-remote-test-main-thread-ms) before) 50.0))))
      (should (= (1+ reports) (fastrevert-remote-fault-test--reports host)))
      (should (equal (fastrevert-remote-test-text (caar pairs)) "start\n"))
      ;; The host is back; the next use of the connection reconnects Tramp.
      (fastrevert-remote-test-sshd-restart)
      (should (file-exists-p (fastrevert-remote-test-file host fastrevert-remote-test--dir)))
      (should (fastrevert-test-wait-for (lambda () (fastrevert-remote-test-running-p host)) 30))
      (should (fastrevert-test-wait-for
               (lambda () (equal (fastrevert-remote-test-text (caar pairs)) "while away\n"))
               15))
      (fastrevert-remote-test-write (cdr (nth 5 pairs)) "after\n")
      (should (fastrevert-test-wait-for
               (lambda () (equal (fastrevert-remote-test-text (car (nth 5 pairs))) "after\n"))
               15))
      (should (= (1+ reports) (fastrevert-remote-fault-test--reports host))))))

(ert-deftest fastrevert-remote-fault-silent-host-never-blocks ()
  "A host that stops answering makes no round trip and no wait on the main thread.
What changed there meanwhile shows once it answers again."
  (fastrevert-remote-test--with-mode
    :relay-delay 25
    (let ((pairs (fastrevert-remote-fault-test--open "frd1" 3)))
      (fastrevert-remote-test-wait-settled (mapcar #'car pairs))
      (fastrevert-remote-test-relay-freeze t)
      (let* ((stalls nil)
             (trips (unwind-protect
                        (fastrevert-remote-test-round-trips
                         (lambda ()
                           (fastrevert-remote-test-write (cdar pairs) "said while silent\n")
                           (setq stalls (fastrevert-remote-test-stalls 3))))
                      (fastrevert-remote-test-relay-freeze nil))))
        (ert-info ((format "round trips %S, stalls (late . busy) %S s" trips stalls))
          (should (equal trips '(0 . 0)))
          (should (< (car stalls) 1.0))
          (should (<= (cdr stalls) 0.05))))
      (should (fastrevert-test-wait-for
               (lambda () (equal (fastrevert-remote-test-text (caar pairs)) "said while silent\n"))
               15)))))

(ert-deftest fastrevert-remote-fault-tries-to-restart-with-a-growing-delay ()
  "Each failed start of a watcher doubles the wait before the next, up to a limit.
Its end is reported once until a watcher runs again."
  (let ((conn (fastrevert-remote--conn-create "/frssh:nowhere:" "nowhere"))
        (messages (fastrevert-remote-fault-test--reports "nowhere"))
        (delays nil))
    (unwind-protect
        (progn
          (dotimes (_ 8)
            (fastrevert-remote--ended conn "test")
            (push (fastrevert-remote--conn-retry-delay conn) delays))
          (should (equal (nreverse delays) '(1.0 2.0 4.0 8.0 16.0 32.0 60.0 60.0)))
          (should (= (1+ messages) (fastrevert-remote-fault-test--reports "nowhere")))
          ;; A try before the delay is up starts nothing.
          (should (eq (fastrevert-remote--conn-state conn) 'down))
          (should (> (fastrevert-remote--conn-next-try conn) (+ (float-time) 50))))
      (fastrevert-remote--stop conn))))

(provide 'fastrevert-remote-fault-test)

;;; fastrevert-remote-fault-test.el ends here
