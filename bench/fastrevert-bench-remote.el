;;; fastrevert-bench-remote.el --- Remote files through Tramp, stock and fastrevert  -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;;; Commentary:

;; The section of `make bench-full' on remote files: auto-revert through
;; Tramp's ssh method, `auto-revert-remote-files' t, under
;; `global-auto-revert-mode'.  The host is the tests' own sshd on
;; loopback (test/lisp/fastrevert-remote-helpers.el), reached directly
;; or through the tests' relay, which holds each chunk 25 ms each way
;; (a 50 ms round trip).
;;
;; For 10 and 100 remote buffers, spread over 1 and 3 connections, with
;; no added delay and with the 50 ms round trip, each of stock
;; (notification, the default; and polling, notification off, at 10
;; buffers on one connection) and fastrevert (and its watcher's shell
;; loop, as without inotifywait, at an interval of 1 s, at 10 buffers on
;; one connection):
;;
;; - the seconds to open the files;
;; - the longest stall of the main thread in the 12 s after they are
;;   open, nothing changing (a wait of 50 ms that returned late by that
;;   much), and the stalls' milliseconds per second then, counting
;;   only those of 5 ms or more;
;; - the seconds from a write on the host to the new text in its
;;   buffer, median and 90th percentile of 5 writes;
;; - a log followed in `auto-revert-tail-mode' while written at 100
;;   lines a second for 3 s: whether the buffer ends up with exactly
;;   the file's text, and how long after the last line it has it.
;;
;; Stock makes one notification process per buffer, each on a login of
;; its own on the main thread; its watches stop being added once they
;; have taken 30 s (the buffers left are polled, as stock polls a
;; buffer without a watch), and a wait for a write or a log gives up
;; after 20 s; a cell that makes no progress for 90 s is given up.  Lock files
;; on the host are off (`remote-file-name-inhibit-locks'), as nothing is
;; edited.  fastrevert's revert of a remote buffer is followed by
;; stock's VC refresh, through Tramp: the stalls of those refreshes
;; come after the text has shown, and are counted in the stalls.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'autorevert)
(require 'fastrevert-bench)

(eval-and-compile
  (let ((tests (expand-file-name "../test/lisp/"
                                 (file-name-directory
                                  (or load-file-name
                                      (bound-and-true-p byte-compile-current-file)
                                      buffer-file-name)))))
    (add-to-list 'load-path tests)))
(require 'fastrevert-remote-helpers)
(require 'tramp)

(declare-function fastrevert-mode "fastrevert" (&optional arg))
(declare-function fastrevert-stats "fastrevert" ())

(defconst fastrevert-bench-remote--sizes
  '((:buffers (10 100) (10))
    (:connections (1 3) (1 3))
    (:delays (0 25) (0 25))
    (:window 12 6)
    (:writes 5 3)
    (:tail-seconds 3 2)
    (:watch-cap 30 10)
    (:wait-cap 20 10)
    (:stuck-cap 90 60))
  "Workload sizes of this section as (KEY DEFAULT QUICK).")

(defun fastrevert-bench-remote--size (key)
  "Return the size KEY of this section for this run."
  (fastrevert-bench-size key fastrevert-bench-remote--sizes))

;;;; Stock's watches, capped

(defvar fastrevert-bench-remote--watch-seconds 0.0
  "Seconds stock spent adding notification watches in this cell.")

(defvar fastrevert-bench-remote--watches-skipped 0
  "Watches stock was not let add in this cell, once the cap was reached.")

(defun fastrevert-bench-remote--capped-watch (function &rest args)
  "Call FUNCTION (stock's add-watch) with ARGS unless the cap is reached."
  (if (> fastrevert-bench-remote--watch-seconds (fastrevert-bench-remote--size :watch-cap))
      (setq fastrevert-bench-remote--watches-skipped (1+ fastrevert-bench-remote--watches-skipped))
    (let ((start (float-time)))
      (unwind-protect (apply function args)
        (setq fastrevert-bench-remote--watch-seconds
              (+ fastrevert-bench-remote--watch-seconds (- (float-time) start)))))))

(defvar fastrevert-bench-remote--progress 0.0
  "When the cell being measured last made progress, as a `float-time'.")

;;;; Stock's filter errors

(defvar fastrevert-bench-remote--filter-errors 0
  "Errors that Tramp's notification filters signaled in this cell.")

(defun fastrevert-bench-remote--demoted-filter (function &rest args)
  "Call FUNCTION, a notification filter of Tramp's, with ARGS; count its errors.
Tramp's inotifywait filter signals on lines it cannot parse, which
come when a file is written many times a second.  An interactive
Emacs reports that and goes on, but a batch Emacs exits."
  (condition-case nil
      (apply function args)
    (error (setq fastrevert-bench-remote--filter-errors
                 (1+ fastrevert-bench-remote--filter-errors)))))

(defconst fastrevert-bench-remote--tramp-filters
  '(tramp-sh-inotifywait-process-filter tramp-sh-gio-monitor-process-filter)
  "Tramp's filters of its file notification processes.")

;;;; Measuring

(defun fastrevert-bench-remote--window (seconds)
  "Let Emacs run SECONDS; return (LONGEST . MS-PER-SECOND) of its stalls.
A stall is a wait of 50 ms that returned late; only those of 5 ms or
more count toward the milliseconds per second."
  (let* ((start (float-time))
         (end (+ start seconds))
         (longest 0.0)
         (stalled 0.0))
    (while (< (float-time) end)
      (let ((before (float-time)))
        (fastrevert-bench-remote--progressed)
        (accept-process-output nil 0.05)
        (let ((late (- (float-time) before 0.05)))
          (setq longest (max longest late))
          (when (>= late 0.005)
            (setq stalled (+ stalled late))))))
    (cons longest (/ (* 1000 stalled) (- (float-time) start)))))

(defun fastrevert-bench-remote--own-ms ()
  "Return the milliseconds fastrevert's handlers have spent on the main thread."
  (let ((stats (fastrevert-stats)))
    (+ (plist-get stats :main-thread-ms) (plist-get stats :remote-check-ms))))

(defun fastrevert-bench-remote--wait-text (buffer text)
  "Wait until BUFFER has TEXT, at most the wait cap; return seconds or nil."
  (let* ((start (float-time))
         (deadline (+ start (fastrevert-bench-remote--size :wait-cap))))
    (while (and (not (equal (fastrevert-remote-test-text buffer) text))
                (< (float-time) deadline))
      (fastrevert-bench-remote--progressed)
      (accept-process-output nil 0.01))
    (and (equal (fastrevert-remote-test-text buffer) text) (- (float-time) start))))

(defun fastrevert-bench-remote--latencies (pairs)
  "Return the seconds each write took to reach its buffer (nil: not in time).
PAIRS are (BUFFER . LOCAL-FILE), written to in turn."
  (cl-loop for i below (fastrevert-bench-remote--size :writes)
           collect (pcase-let* ((`(,buffer . ,file) (nth (% (* i 7) (length pairs)) pairs))
                                (text (format "bench write %d %s\n" i (float-time))))
                     (fastrevert-remote-test-write file text)
                     (prog1 (fastrevert-bench-remote--wait-text buffer text)
                       (fastrevert-bench-remote--window 1.0)))))

(defun fastrevert-bench-remote--tail (host dir)
  "Follow a log on HOST in DIR written at 100 lines a second; return a summary."
  (let* ((file (expand-file-name "tail.log" dir))
         (buffer (progn (fastrevert-remote-test-write file "begin\n")
                        (find-file-noselect (fastrevert-remote-test-file host file)))))
    (unwind-protect
        (progn
          (with-current-buffer buffer (auto-revert-tail-mode 1))
          (fastrevert-bench-remote--window 2)
          (let ((writer (make-process
                         :name "fastrevert-bench-log" :buffer nil :noquery t
                         :command (list "sh" "-c" "i=0; while [ $i -lt $1 ]; do \
echo \"line $i\"; i=$((i+1)); sleep 0.01; done >>\"$2\""
                                        "sh" (number-to-string
                                              (* 100 (fastrevert-bench-remote--size :tail-seconds)))
                                        file))))
            (while (process-live-p writer)
              (fastrevert-bench-remote--progressed)
              (accept-process-output nil 0.05)))
          (let* ((expected (with-temp-buffer (insert-file-contents file) (buffer-string)))
                 (took (fastrevert-bench-remote--wait-text buffer expected)))
            (if took
                (format "exact, +%.1f s" took)
              (let ((have (split-string (fastrevert-remote-test-text buffer) "\n" t))
                    (want (split-string expected "\n" t)))
                (format "%d lines of %d (%d doubled)"
                        (length (cl-intersection have want :test #'equal)) (length want)
                        (- (length have) (length (delete-dups (copy-sequence have)))))))))
      (with-current-buffer buffer (set-buffer-modified-p nil))
      (kill-buffer buffer))))

;;;; One cell

(defun fastrevert-bench-remote--set-up (impl)
  "Turn on auto-revert as IMPL (`fastrevert', `stock' or `stock-poll') does it."
  (setq fastrevert-bench-remote--watch-seconds 0.0
        fastrevert-bench-remote--watches-skipped 0
        fastrevert-bench-remote--filter-errors 0)
  (dolist (filter fastrevert-bench-remote--tramp-filters)
    (advice-add filter :around #'fastrevert-bench-remote--demoted-filter))
  (setq auto-revert-use-notify (not (memq impl '(stock-poll fastrevert-poll)))
        auto-revert-interval (if (eq impl 'fastrevert-poll) 1 5))
  (when (memq impl '(fastrevert fastrevert-poll)) (fastrevert-mode 1))
  (unless (memq impl '(fastrevert fastrevert-poll))
    (advice-add 'auto-revert-notify-add-watch :around #'fastrevert-bench-remote--capped-watch))
  (global-auto-revert-mode 1))

(defun fastrevert-bench-remote--tear-down ()
  "Kill the remote buffers and turn every mode off."
  (fastrevert-remote-test-cleanup)
  (advice-remove 'auto-revert-notify-add-watch #'fastrevert-bench-remote--capped-watch)
  (setq auto-revert-interval 5)
  (dolist (filter fastrevert-bench-remote--tramp-filters)
    (advice-remove filter #'fastrevert-bench-remote--demoted-filter))
  (setq auto-revert-use-notify t))

(defun fastrevert-bench-remote--cell (impl count hosts root)
  "Measure IMPL with COUNT buffers spread over HOSTS, files under ROOT.
Return the row's cells after the first four.  A cell that makes no
progress for `:stuck-cap' seconds (stock's can hang in Tramp for good,
a timer having entered Tramp while it waited) is given up, and Tramp's
connections are opened anew for the next."
  ;; Each cell opens Tramp's connections anew, whichever came before.
  (tramp-cleanup-all-connections)
  (setq fastrevert-bench-remote--progress (float-time))
  (let* ((cap (fastrevert-bench-remote--size :stuck-cap))
         (watchdog (run-with-timer 5 5 #'fastrevert-bench-remote--watch-progress cap))
         (result (unwind-protect
                     (catch 'fastrevert-bench-remote--stuck
                       (fastrevert-bench-remote--measure impl count hosts root))
                   (cancel-timer watchdog))))
    (or result
        (progn
          (fastrevert-bench-remote--tear-down)
          (tramp-cleanup-all-connections)
          (list "-" "-" "-" "-" "-" "-" "-"
                (format "hung: nothing for %d s, given up" cap))))))

(defun fastrevert-bench-remote--progressed ()
  "Note that the cell being measured has made progress."
  (setq fastrevert-bench-remote--progress (float-time)))

(defun fastrevert-bench-remote--watch-progress (cap)
  "Give the cell up if it has made no progress for CAP seconds."
  (when (> (- (float-time) fastrevert-bench-remote--progress) cap)
    (throw 'fastrevert-bench-remote--stuck nil)))

(defun fastrevert-bench-remote--measure (impl count hosts root)
  "Measure IMPL with COUNT buffers spread over HOSTS, files under ROOT.
Return the row's cells after the first four."
  (let* ((dirs (mapcar (lambda (host)
                         (let ((dir (file-name-as-directory (expand-file-name host root))))
                           (make-directory dir t)
                           dir))
                       hosts))
         (files (cl-loop for i below count
                         for k = (% i (length hosts))
                         collect (let ((file (expand-file-name (format "f%03d" i) (nth k dirs))))
                                   (fastrevert-remote-test-write file "start\n")
                                   (cons (nth k hosts) file)))))
    (fastrevert-bench-remote--set-up impl)
    (unwind-protect
        (let* ((start (float-time))
               (pairs (mapcar (lambda (entry)
                                (prog1 (cons (find-file-noselect
                                              (fastrevert-remote-test-file (car entry) (cdr entry)))
                                             (cdr entry))
                                  (fastrevert-bench-remote--progressed)))
                              files))
               (open (- (float-time) start))
               (own-before (fastrevert-bench-remote--own-ms))
               (window (fastrevert-bench-remote--window (fastrevert-bench-remote--size :window)))
               (own (and (memq impl '(fastrevert fastrevert-poll))
                         (/ (- (fastrevert-bench-remote--own-ms) own-before)
                            (fastrevert-bench-remote--size :window))))
               (latencies (fastrevert-bench-remote--latencies pairs))
               (arrived (delq nil (copy-sequence latencies)))
               (tail (fastrevert-bench-remote--tail (car hosts) (car dirs))))
          (list (format "%.1f" open)
                (format "%.2f" (car window))
                (format "%.0f" (cdr window))
                (if own (format "%.2f" own) "-")
                (if arrived (format "%.2f" (fastrevert-bench-median arrived)) "-")
                (if (memq nil latencies)
                    (format ">%d (%d of %d)" (fastrevert-bench-remote--size :wait-cap)
                            (length arrived) (length latencies))
                  (format "%.2f" (fastrevert-remote-test-p90 latencies)))
                tail
                (string-join
                 (delq nil
                       (list (and (> fastrevert-bench-remote--watches-skipped 0)
                                  (format "watches cut at %.0f s"
                                          fastrevert-bench-remote--watch-seconds))
                             (and (> fastrevert-bench-remote--filter-errors 0)
                                  (format "%d Tramp filter errors"
                                          fastrevert-bench-remote--filter-errors))))
                 "; ")))
      (fastrevert-bench-remote--tear-down)
      (dolist (dir dirs) (delete-directory dir t)))))

;;;; The cost of a line

(defun fastrevert-bench-remote--line-cost ()
  "Return (CHANGED UNCHANGED), milliseconds per watcher line handled.
A connection watches 100 files, each with a buffer; 20,000 lines come
in chunks of 100, first each with a new modification time (each
queues its buffer), then again unchanged.  No Tramp call is made."
  (let* ((conn (fastrevert-remote--conn-create "/ssh:bench.example:" "bench.example"))
         (items (fastrevert-remote--conn-items conn))
         (names (cl-loop for i below 100 collect (format "/srv/project/src/file%03d.c" i)))
         (buffers (mapcar (lambda (name)
                            (let ((buffer (generate-new-buffer " *fastrevert-bench-line*"))
                                  (item (fastrevert-remote--item-create name)))
                              (with-current-buffer buffer
                                (setq fastrevert-remote--applied "0 0"))
                              (push buffer (fastrevert-remote--item-buffers item))
                              (puthash name item items)
                              buffer))
                          names))
         (chunks (cl-loop for k below 200
                          collect (mapconcat (lambda (name)
                                               (format "M 1796200%03d.123456789 %d %s\n" k k name))
                                             names "")))
         (measure (lambda ()
                    (garbage-collect)
                    (let ((start (float-time)))
                      (dolist (chunk chunks) (fastrevert-remote--output conn chunk))
                      (/ (* 1000 (- (float-time) start)) 20000)))))
    (unwind-protect
        (let ((changed (funcall measure)))
          (list changed (funcall measure)))
      (clrhash fastrevert-remote--pending)
      (when (timerp fastrevert-remote--check-timer)
        (cancel-timer fastrevert-remote--check-timer)
        (setq fastrevert-remote--check-timer nil))
      (mapc #'kill-buffer buffers))))

;;;; The section

(defun fastrevert-bench-remote--run (root)
  "Print the remote-files table, its files made under ROOT."
  (condition-case err
      (let ((sshd (fastrevert-remote-test-sshd-start :relay-delay 25))
            (rows nil))
        (unwind-protect
            (let ((auto-revert-remote-files t)
                  ;; No lock files on the host: an edit is not measured.
                  (remote-file-name-inhibit-locks t)
                  (auto-revert-verbose nil)
                  (auto-revert-interval 5)
                  (auto-revert-stop-on-user-input t)
                  (auto-revert-notify-exclude-dir-regexp
                   (concat "^" (regexp-opt '("/afs/" "/media/" "/mnt" "/net/" "/tmp_mnt/")))))
              (fastrevert-bench--progress "remote: the machine's own stalls")
              (let ((window (fastrevert-bench-remote--window (fastrevert-bench-remote--size :window))))
                (push (list "0" "0" "-" "nothing open (noise floor)" "-"
                            (format "%.2f" (car window)) (format "%.0f" (cdr window))
                            "-" "-" "-" "-" "")
                      rows))
              (dolist (delay (fastrevert-bench-remote--size :delays))
                (dolist (connections (fastrevert-bench-remote--size :connections))
                  (dolist (count (fastrevert-bench-remote--size :buffers))
                    (dolist (impl (if (and (= count 10) (= connections 1))
                                      '(fastrevert fastrevert-poll stock stock-poll)
                                    '(fastrevert stock)))
                      (let ((hosts (cl-loop for i from 1 to connections
                                            collect (format (if (zerop delay) "fr%d" "frd%d") i))))
                        (fastrevert-bench--progress "remote: %d buffers, %d connections, %d ms, %s"
                                                    count connections (* 2 delay) impl)
                        (push (append (list (number-to-string count) (number-to-string connections)
                                            (format "%d ms" (* 2 delay))
                                            (pcase impl
                                              ('fastrevert "fastrevert")
                                              ('fastrevert-poll "fastrevert, shell loop, 1 s")
                                              ('stock "stock, notification")
                                              ('stock-poll "stock, polling")))
                                      (fastrevert-bench-remote--cell impl count hosts root))
                              rows)))))))
          (fastrevert-remote-test-sshd-stop sshd))
        (fastrevert-bench--heading
         "Remote files through Tramp (ssh), `auto-revert-remote-files' t, global-auto-revert-mode")
        (fastrevert-bench--out "Round trip: added by a relay on loopback.  Stall: the longest \
time the main thread was\nbusy in the %d s after the files were open, nothing changing; \
ms/s: those stalls of\n5 ms or more per second (a busy machine makes some of its own: the \
first row); own ms/s:\nthe main thread's time in fastrevert's handlers then, from its \
counters.  Open: seconds to open\nthe files, Tramp's connections included.  Write: seconds from a write on the host \
to its text in the\nbuffer (%d writes).  Tail: a log written at 100 lines/s for %d s, \
followed in tail mode.\n\n"
                               (fastrevert-bench-remote--size :window)
                               (fastrevert-bench-remote--size :writes)
                               (fastrevert-bench-remote--size :tail-seconds))
        (fastrevert-bench--print-table
         '("buffers" "conns" "RTT" "implementation" "open s" "stall s" "idle ms/s"
           "own ms/s" "write median s" "write P90 s" "tail 100 lines/s" "note")
         (nreverse rows))
        (let ((cost (fastrevert-bench-remote--line-cost)))
          (fastrevert-bench--out "A watcher's line costs the main thread %.4f ms when its file \
changed (its buffer\nqueued for a check), %.4f ms when not (100 files watched; no Tramp call).\n"
                                 (car cost) (cadr cost))))
    (error (fastrevert-bench--loud "remote files: %s" (error-message-string err)))))

(add-hook 'fastrevert-bench-full-sections #'fastrevert-bench-remote--run 90)

(provide 'fastrevert-bench-remote)

;;; fastrevert-bench-remote.el ends here
