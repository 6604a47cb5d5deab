;;; fastrevert-bench-revert.el --- Auto-revert benchmarks, stock and fastrevert  -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;;; Commentary:

;; The auto-revert columns and sections of `make bench':
;;
;; - a `fastrevert' column in the idle-tick table: what the main thread
;;   spends per `auto-revert-interval' while nothing changes;
;; - "three kinds of change": for each file count, the visited file
;;   changing every second, only another file in the same directory
;;   changing, and nothing changing, each watched for a few seconds
;;   under stock polling, stock notification and fastrevert, with the
;;   main-thread work shown as elp tables;
;; - "burst": a checkout-like rewrite of many visited files by another
;;   program, timed until every buffer matches the disk, against the
;;   time Emacs needs just to re-read those files.

;;; Code:

(require 'cl-lib)
(require 'elp)
(require 'autorevert)
(require 'fastrevert-bench)
(require 'vc-hooks)

(declare-function fastrevert-mode "fastrevert" (&optional arg))
(declare-function fastrevert--refresh-vc-of "fastrevert" (buffer))
(declare-function fastrevert--watching-p "fastrevert-watch" (buffer))
(defvar fastrevert-mode)
(defvar fastrevert--main-thread-seconds)
(defvar fastrevert--revert-timer)
(defvar fastrevert--pending)
(defvar fastrevert--vc-pending)
(defvar fastrevert-settle-delay)

(defconst fastrevert-bench-revert--sizes
  '((:scenario-counts (100 1000) (100))
    (:scenario-seconds 3 1)
    (:burst-count 1000 200)
    (:burst-stock-deadline 12 3))
  "Workload sizes of these benchmarks as (KEY DEFAULT QUICK).")

(defun fastrevert-bench-revert--size (key)
  "Return the size KEY for this run."
  (let ((entry (assq key fastrevert-bench-revert--sizes)))
    (if (fastrevert-bench-quick-p) (nth 2 entry) (nth 1 entry))))

;;;; Running under each implementation

(defun fastrevert-bench-revert--with (impl buffers thunk)
  "Call THUNK with auto-revert for BUFFERS run by IMPL.
IMPL is `stock-poll', `stock-notify' or `fastrevert'.  Global
Auto-Revert mode is on throughout, with the default settings but
for notification, and everything is turned off again afterwards."
  (let ((old-notify auto-revert-use-notify)
        (auto-revert-verbose nil))
    (unwind-protect
        (progn
          (fastrevert-bench--set-custom 'auto-revert-use-notify (not (eq impl 'stock-poll)))
          (when (eq impl 'fastrevert) (fastrevert-mode 1))
          (global-auto-revert-mode 1)
          ;; Let every buffer get its watch and first check.
          (if (eq impl 'fastrevert)
              (fastrevert-bench-revert--settle buffers)
            (auto-revert-buffers)
            (auto-revert-buffers))
          (funcall thunk))
      (global-auto-revert-mode -1)
      (when (eq impl 'fastrevert) (fastrevert-mode -1))
      (fastrevert-bench--set-custom 'auto-revert-use-notify old-notify))))

(defun fastrevert-bench-revert--settle (buffers)
  "Wait until fastrevert watches BUFFERS and has nothing pending."
  (let ((deadline (+ (float-time) 120)))
    (while (and (< (float-time) deadline)
                (not (and (cl-every (lambda (buffer)
                                      (fastrevert--watching-p buffer))
                                    buffers)
                          (not fastrevert--revert-timer)
                          (zerop (hash-table-count fastrevert--pending))
                          (zerop (hash-table-count fastrevert--vc-pending)))))
      (accept-process-output nil 0.01))))

(defun fastrevert-bench-revert--idle (seconds)
  "Let Emacs run timers, process output and file events for SECONDS.
File notification events arrive as input events, so they are read
too, which is what an interactive Emacs does while idle."
  (let ((deadline (+ (float-time) seconds)))
    (while (< (float-time) deadline)
      (read-event nil nil (min 0.05 (max 0.001 (- deadline (float-time))))))))

;;;; The idle tick column

(defun fastrevert-bench-revert--tick (buffers ticks)
  "Measure fastrevert's cost on the main thread per idle tick, over BUFFERS.
With fastrevert on, no timer runs for the buffers; the cost per tick
is what the stock timer still finds to do (run if it exists) plus
the time fastrevert spends on the main thread, over TICKS intervals
of 0.1 s in which the engine polls the files in the background."
  (let ((auto-revert-interval 0.1)
        (auto-revert-avoid-polling nil))
    (fastrevert-bench-revert--with
     'fastrevert buffers
     (lambda ()
       (let ((times nil))
         (garbage-collect)
         (let ((triple
                (benchmark-run 1
                  (dotimes (_ ticks)
                    (let ((before fastrevert--main-thread-seconds)
                          (timer-cost 0))
                      ;; Only work that runs counts: a stock timer, if one
                      ;; is still needed, and fastrevert's own handling.
                      (when (timerp auto-revert-timer)
                        (let ((start (float-time)))
                          (funcall (timer--function auto-revert-timer))
                          (setq timer-cost (- (float-time) start))))
                      (accept-process-output nil auto-revert-interval)
                      (push (+ timer-cost (- fastrevert--main-thread-seconds before))
                            times))))))
           (list :times (nreverse times) :triple triple :incomplete 0
                 :watched (cl-count-if (lambda (buffer)
                                         (fastrevert--watching-p buffer))
                                       buffers))))))))

;;;; Three kinds of change

(defconst fastrevert-bench-revert--elp-functions
  '(auto-revert-buffers
    auto-revert-notify-handler
    auto-revert-handler
    revert-buffer
    fastrevert--drain
    fastrevert--revert-pending
    fastrevert--check-buffer)
  "Entry points of auto-revert work on the main thread, for the elp tables.")

(defconst fastrevert-bench-revert--entry-points
  '(auto-revert-buffers auto-revert-notify-handler fastrevert--drain
                        fastrevert--revert-pending)
  "The functions that Emacs's event loop calls.
Their sum is the cost on the main thread.")

(defun fastrevert-bench-revert--writer (file)
  "Start a process that rewrites FILE every second; return it."
  (start-process "fastrevert-bench-writer" nil "sh" "-c"
                 "i=0; while :; do i=$((i+1)); echo \"change $i\" > \"$1\"; sleep 1; done"
                 "sh" file))

(defun fastrevert-bench-revert--elp-counts ()
  "Return the elp counts, an alist of (FUNCTION COUNT . SECONDS)."
  (let (result)
    (dolist (function fastrevert-bench-revert--elp-functions)
      (let ((info (get function elp-timer-info-property)))
        (when (and info (> (aref info 0) 0))
          (push (cons function (cons (aref info 0) (aref info 1))) result))))
    (nreverse result)))

(defun fastrevert-bench-revert--scenario (impl buffers scenario seconds dir)
  "Watch BUFFERS under IMPL for SECONDS while SCENARIO happens in DIR.
SCENARIO is `visited' (the first buffer's file changes every
second), `other' (an unvisited file in DIR does) or `none'.
Return a plist with :elp (per-function calls and seconds) and
:main-ms (the total on the main thread)."
  (let ((auto-revert-interval 1))
    (fastrevert-bench-revert--with
     impl buffers
     (lambda ()
       (elp-restore-all)
       (elp-reset-all)
       (let ((writer (pcase scenario
                       ('visited (fastrevert-bench-revert--writer
                                  (buffer-file-name (car buffers))))
                       ('other (fastrevert-bench-revert--writer
                                (expand-file-name "unvisited.log" dir))))))
         (unwind-protect
             (progn
               ;; Only the functions that IMPL itself runs: the engine may
               ;; still deliver a result left from an earlier column.
               (mapc #'elp-instrument-function
                     (if (eq impl 'fastrevert)
                         fastrevert-bench-revert--elp-functions
                       (cl-remove-if (lambda (f) (string-prefix-p "fastrevert-" (symbol-name f)))
                                     fastrevert-bench-revert--elp-functions)))
               (fastrevert-bench-revert--idle seconds)
               (let ((counts (fastrevert-bench-revert--elp-counts)))
                 (list :elp counts
                       :main-ms (* 1000 (cl-loop for (function . (_ . secs)) in counts
                                                 when (memq function
                                                            fastrevert-bench-revert--entry-points)
                                                 sum secs)))))
           (elp-restore-all)
           (when writer (delete-process writer))))))))

(defun fastrevert-bench-revert--run-scenarios (root)
  "Run every scenario for every file count under ROOT and print the tables."
  (let ((seconds (fastrevert-bench-revert--size :scenario-seconds))
        (impls '(stock-poll stock-notify fastrevert))
        summary)
    (fastrevert-bench--heading "Auto-revert under three kinds of change")
    (fastrevert-bench--out
     "Global Auto-Revert mode, `auto-revert-interval' 1 s, each cell watched for %d s.
- visited: the first visited file is rewritten every second by another program;
- other: only an unvisited file in the same directory is;
- none: nothing changes.
The elp tables list the main-thread functions that ran; main ms sums the
entry points Emacs's event loop calls (`auto-revert-buffers',
`auto-revert-notify-handler', `fastrevert--drain', `fastrevert--revert-pending').\n\n"
     seconds)
    (dolist (count (fastrevert-bench-revert--size :scenario-counts))
      (let* ((dir (expand-file-name (format "scenario-%d" count) root))
             (buffers (fastrevert-bench--visit (fastrevert-bench--make-files dir count))))
        (unwind-protect
            (dolist (scenario '(visited other none))
              (dolist (impl impls)
                (fastrevert-bench--progress "scenario %s, %d files, %s" scenario count impl)
                (let ((result (fastrevert-bench-revert--scenario impl buffers scenario seconds dir)))
                  (push (list count scenario impl result) summary))))
          (fastrevert-bench--kill-buffers buffers)
          (delete-directory dir t))))
    (setq summary (nreverse summary))
    (fastrevert-bench--print-table
     '("files" "change" "stock poll main ms" "stock notify main ms" "fastrevert main ms"
       "poll / fastrevert" "notify / fastrevert")
     (cl-loop
      for (count scenario) in (cl-remove-duplicates
                               (mapcar (lambda (entry) (list (nth 0 entry) (nth 1 entry)))
                                       summary)
                               :test #'equal :from-end t)
      collect
      (let ((ms (lambda (impl)
                  (plist-get (nth 3 (cl-find-if (lambda (entry)
                                                  (and (eql (nth 0 entry) count)
                                                       (eq (nth 1 entry) scenario)
                                                       (eq (nth 2 entry) impl)))
                                                summary))
                             :main-ms))))
        (list (number-to-string count) (symbol-name scenario)
              (format "%.2f" (funcall ms 'stock-poll))
              (format "%.2f" (funcall ms 'stock-notify))
              (format "%.3f" (funcall ms 'fastrevert))
              (fastrevert-bench-revert--ratio (funcall ms 'stock-poll) (funcall ms 'fastrevert))
              (fastrevert-bench-revert--ratio (funcall ms 'stock-notify)
                                              (funcall ms 'fastrevert))))))
    (dolist (entry summary)
      (pcase-let ((`(,count ,scenario ,impl ,result) entry))
        (fastrevert-bench--out "elp: %d files, change %s, %s\n\n" count scenario impl)
        (fastrevert-bench--print-table
         '("Function Name" "Call Count" "Elapsed Time" "Average Time")
         (or (mapcar (lambda (row)
                       (pcase-let ((`(,function ,calls . ,secs) row))
                         (list (symbol-name function) (number-to-string calls)
                               (format "%.6f" secs) (format "%.6f" (/ secs calls)))))
                     (plist-get result :elp))
             '(("(nothing ran)" "0" "0.000000" "-"))))))))

(defun fastrevert-bench-revert--ratio (stock fastrevert)
  "Return STOCK / FASTREVERT as text, or a lower bound when FASTREVERT is 0."
  (cond ((or (null stock) (null fastrevert)) "-")
        ((> fastrevert 0) (format "%.0fx" (/ stock fastrevert)))
        ((> stock 0) "inf (nothing ran)")
        (t "-")))

;;;; Burst

(defvar fastrevert-bench-revert--generation 0
  "How many bursts have been made; each writes contents of its own.")

(defun fastrevert-bench-revert--contents (file)
  "Return what the current burst writes to FILE."
  (format "burst %d %s\n" fastrevert-bench-revert--generation file))

(defun fastrevert-bench-revert--rewrite (dir)
  "Rewrite every visited file in DIR, as a checkout does, from another program."
  (setq fastrevert-bench-revert--generation (1+ fastrevert-bench-revert--generation))
  (call-process "sh" nil nil nil "-c"
                "for f in \"$1\"/*.txt; do echo \"burst $2 $f\" > \"$f\"; done" "sh" dir
                (number-to-string fastrevert-bench-revert--generation)))

(defun fastrevert-bench-revert--drop-caches ()
  "Drop the page cache when running as root; return non-nil if done."
  (and (zerop (user-uid))
       (file-writable-p "/proc/sys/vm/drop_caches")
       (zerop (call-process "sh" nil nil nil "-c" "sync && echo 3 > /proc/sys/vm/drop_caches"))))

(defun fastrevert-bench-revert--stale-p (buffer)
  "Return non-nil if BUFFER differs from its file's new contents."
  (with-current-buffer buffer
    (not (equal (buffer-substring-no-properties (point-min) (point-max))
                (fastrevert-bench-revert--contents buffer-file-name)))))

(defun fastrevert-bench-revert--stale (buffers)
  "Return how many of BUFFERS differ from their files' new contents."
  (cl-count-if #'fastrevert-bench-revert--stale-p buffers))

(defun fastrevert-bench-revert--burst-once (impl buffers dir cold deadline)
  "Rewrite DIR's files and time IMPL until BUFFERS match; give up after DEADLINE s.
COLD non-nil drops the page cache after the rewrite.  IMPL is
`stock-notify', `fastrevert' or `reread' (every buffer reverted
directly, the limit) or `reread-vc' (the same, plus the VC refresh
that the stock handler does after every revert).  Return (SECONDS
STALE DONE): seconds until every buffer matched, the buffers still
stale then, and seconds until the VC refreshes were done as well."
  (let ((start nil) (matched-at nil) stale)
    (let ((measure
           (lambda ()
             (fastrevert-bench-revert--rewrite dir)
             (when cold (fastrevert-bench-revert--drop-caches))
             (setq start (float-time))
             (when (eq impl 'fastrevert)
               ;; fastrevert refreshes VC state only once every pending text
               ;; is reverted and redisplayed; the first refresh with no stale
               ;; buffer left marks the moment the texts all matched.
               ;; The check resumes at the buffer last seen stale, since a
               ;; buffer once up to date stays so: comparing every buffer on
               ;; every refresh made garbage enough for a GC every few
               ;; refreshes when the changes came in two batches.
               (let ((tail buffers)
                     (count (length buffers)))
                 (advice-add 'fastrevert--refresh-vc-of :before
                             (lambda (&rest _)
                               (unless matched-at
                                 (let ((checked 0)
                                       (found nil))
                                   (while (and (not found) (< checked count))
                                     (unless tail (setq tail buffers))
                                     (if (fastrevert-bench-revert--stale-p (car tail))
                                         (setq found t)
                                       (setq tail (cdr tail)
                                             checked (1+ checked))))
                                   (unless found (setq matched-at (float-time))))))
                             '((name . fastrevert-bench-matched)))))
             (if (memq impl '(reread reread-vc))
                 (dolist (buffer buffers)
                   (with-current-buffer buffer
                     (revert-buffer 'ignore-auto 'dont-ask 'preserve-modes)
                     (when (eq impl 'reread-vc)
                       (let ((revert-buffer-in-progress-p t))
                         (vc-refresh-state)))))
               (let ((end (+ start deadline)))
                 (while (and (< (float-time) end)
                             (> (fastrevert-bench-revert--stale buffers) 0))
                   (read-event nil nil 0.01))))
             (setq stale (fastrevert-bench-revert--stale buffers))
             (let ((matched (- (or matched-at (float-time)) start)))
               ;; fastrevert refreshes the VC state of reverted buffers
               ;; after their texts; time that too.
               (when (eq impl 'fastrevert)
                 (while (and (< (float-time) (+ start 120))
                             (or fastrevert--revert-timer
                                 (> (hash-table-count fastrevert--vc-pending) 0)))
                   (accept-process-output nil 0.005)))
               (advice-remove 'fastrevert--refresh-vc-of 'fastrevert-bench-matched)
               (list matched stale (- (float-time) start))))))
      (if (memq impl '(reread reread-vc))
          (funcall measure)
        (let ((fastrevert-settle-delay 0.03))
          (fastrevert-bench-revert--with impl buffers measure))))))

(defun fastrevert-bench-revert--run-burst (root)
  "Run the burst benchmark under ROOT and print its table."
  (let* ((count (fastrevert-bench-revert--size :burst-count))
         (deadline (fastrevert-bench-revert--size :burst-stock-deadline))
         (dir (expand-file-name "burst" root))
         (buffers (fastrevert-bench--visit (fastrevert-bench--make-files dir count)))
         (cold-possible (and (zerop (user-uid))
                             (file-writable-p "/proc/sys/vm/drop_caches")))
         rows)
    (unwind-protect
        (dolist (cold (if cold-possible '(nil t) '(nil)))
          (let ((limit (fastrevert-bench-revert--burst-once 'reread buffers dir cold 0))
                (limit-vc (fastrevert-bench-revert--burst-once 'reread-vc buffers dir cold 0)))
            (dolist (impl '(stock-notify fastrevert))
              (unless (and cold (eq impl 'stock-notify))
                (fastrevert-bench--progress "burst: %d files, %s%s" count impl
                                            (if cold ", cold cache" ""))
                (let ((result (fastrevert-bench-revert--burst-once
                               impl buffers dir cold (if (eq impl 'fastrevert) 120 deadline))))
                  (when (and (eq impl 'fastrevert) (> (nth 1 result) 0))
                    (fastrevert-bench--loud "fastrevert left %d of %d buffers stale"
                                            (nth 1 result) count))
                  (push (list (if cold "cold" "hot") (symbol-name impl)
                              (format "%.3f" (nth 0 result))
                              (number-to-string (nth 1 result))
                              (format "%.3f" (nth 2 result))
                              (format "%.3f" (nth 0 limit))
                              (format "%.2f" (/ (nth 0 result) (max 1e-6 (nth 0 limit))))
                              (format "%.3f" (nth 0 limit-vc))
                              (format "%.2f" (/ (nth 0 result) (max 1e-6 (nth 0 limit-vc)))))
                        rows))))))
      (fastrevert-bench--kill-buffers buffers)
      (delete-directory dir t))
    (fastrevert-bench--heading (format "Burst: %d visited files rewritten at once" count))
    (fastrevert-bench--out
     "One directory; another program rewrites every file.  Seconds until every buffer
matches its file (stock gives up after %d s), buffers still stale then, seconds
until the VC state of the reverted buffers was refreshed too (fastrevert does
that after the texts; stock right after each revert), and two limits: the
same buffers reverted directly with `revert-buffer' in a loop (re-read), and that plus the `vc-refresh-state' the stock handler runs after
every revert (re-read+vc).  The cold rows drop the page cache after the
rewrite (root only).\n\n"
     deadline)
    (fastrevert-bench--print-table
     '("cache" "implementation" "seconds" "stale" "with VC s" "re-read s" "ratio"
       "re-read+vc s" "ratio")
     (nreverse rows))))

;;;; Registration

(fastrevert-bench-define 'tick 'fastrevert
  :impl 'fastrevert :header "fastrevert"
  :function #'fastrevert-bench-revert--tick)

;; The burst is a headline section; the three kinds of change take
;; minutes, and go with the full run.
(add-hook 'fastrevert-bench-sections #'fastrevert-bench-revert--run-burst 10)
(add-hook 'fastrevert-bench-full-sections #'fastrevert-bench-revert--run-scenarios 10)

(provide 'fastrevert-bench-revert)

;;; fastrevert-bench-revert.el ends here
