;;; fastrevert-bench-vcinfo.el --- auto-revert-check-vc-info, stock and fastrevert  -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;;; Commentary:

;; The section of `make bench' on `auto-revert-check-vc-info' t, which
;; asks auto-revert to keep every buffer's VC state current although no
;; file changes: a commit, a branch switch or a stash from outside.
;;
;; Every file of a Git repository (10 directories) is visited, one of
;; them shown in the selected window, with `auto-revert-interval' 1.
;; For stock Emacs (notification, the default) and fastrevert:
;;
;; - the main thread's milliseconds per second while nothing happens
;;   (timers, file-notify events, fastrevert's wake-ups);
;; - for `git switch -c', `git commit -a' (of a file edited from
;;   outside) and `git stash' (of such an edit), started from outside
;;   Emacs: milliseconds from the command's start until the shown
;;   buffer's mode line is right, and until every buffer's is, each the
;;   90th percentile of the runs.
;;
;; Stock refreshes every buffer at every tick, starting Git for each;
;; past 50 files a tick outlasts the interval many times over.  So a
;; stock tick is cut short after `:stock-cap' seconds (the buffers
;; left are skipped), and what it would need is reported as such.

;;; Code:

(require 'cl-lib)
(require 'autorevert)
(require 'vc-git)
(require 'fastrevert-bench)
(require 'fastrevert-bench-vc)

(declare-function fastrevert-mode "fastrevert" (&optional arg))
(declare-function fastrevert--watching-p "fastrevert-watch" (buffer))
(declare-function fastrevert--apply-changed-settings "fastrevert" ())
(defvar fastrevert-mode)
(defvar fastrevert--main-thread-seconds)

(defconst fastrevert-bench-vcinfo--sizes
  '((:counts (50 300 1000) (50))
    (:runs 10 2)
    (:stock-runs 1 1)
    (:idle-seconds 3 1)
    (:stock-cap 3 2))
  "Workload sizes of this benchmark as (KEY DEFAULT QUICK).")

(defun fastrevert-bench-vcinfo--size (key)
  "Return the size KEY of this section for this run."
  (fastrevert-bench-size key fastrevert-bench-vcinfo--sizes))

;;;; Cutting stock's ticks short

(defvar fastrevert-bench-vcinfo--cap nil
  "The `float-time' after which VC refreshes are skipped, or nil.")

(defvar fastrevert-bench-vcinfo--skipped 0
  "How many VC refreshes the cap skipped.")

(defun fastrevert-bench-vcinfo--capped (function &rest args)
  "Call FUNCTION with ARGS unless `fastrevert-bench-vcinfo--cap' has passed."
  (if (and fastrevert-bench-vcinfo--cap (> (float-time) fastrevert-bench-vcinfo--cap))
      (setq fastrevert-bench-vcinfo--skipped (1+ fastrevert-bench-vcinfo--skipped))
    (apply function args)))

(defmacro fastrevert-bench-vcinfo--with-cap (seconds &rest body)
  "Run BODY with every `vc-refresh-state' after SECONDS skipped."
  (declare (indent 1))
  `(let ((fastrevert-bench-vcinfo--cap (+ (float-time) ,seconds)))
     (setq fastrevert-bench-vcinfo--skipped 0)
     (advice-add 'vc-refresh-state :around #'fastrevert-bench-vcinfo--capped)
     (unwind-protect (progn ,@body)
       (advice-remove 'vc-refresh-state #'fastrevert-bench-vcinfo--capped))))

;;;; Measuring

(defun fastrevert-bench-vcinfo--wait (predicate seconds)
  "Handle events until PREDICATE is non-nil or SECONDS pass; return its value."
  (let ((deadline (+ (float-time) seconds)))
    (while (and (not (funcall predicate)) (< (float-time) deadline))
      (read-event nil nil 0.002))
    (funcall predicate)))

(defun fastrevert-bench-vcinfo--idle (seconds)
  "Return the main thread's milliseconds per second over SECONDS of idleness.
Also return whether a tick was cut short, as (MS-PER-S . CUT)."
  (let ((fastrevert-bench-vc--busy 0.0)
        (start (float-time)))
    (fastrevert-bench-vc--timing-handlers
      (fastrevert-bench-vcinfo--wait #'ignore seconds))
    (cons (/ (* 1000 fastrevert-bench-vc--busy) (- (float-time) start))
          (> fastrevert-bench-vcinfo--skipped 0))))

(defun fastrevert-bench-vcinfo--shows-p (buffer text revision)
  "Return non-nil if BUFFER's `vc-mode' is TEXT and names REVISION."
  (let ((mode (buffer-local-value 'vc-mode buffer)))
    (and mode
         (equal (substring-no-properties mode) text)
         (or (null revision)
             (string-match-p (regexp-quote revision)
                             (or (get-text-property 1 'help-echo mode) ""))))))

(defun fastrevert-bench-vcinfo--time-command (dir script shown buffers done-p seconds)
  "Run SCRIPT in DIR from outside and time the mode lines catching up.
SHOWN is the buffer in the selected window.  Once the command has
ended, DONE-P is called with what it printed, and returns a function
that says of a buffer whether its mode line is right.  Give up after
SECONDS.  Return (SHOWN-MS . EVERY-MS), nil for what did not catch up."
  (let* ((start (float-time))
         (default-directory dir)
         (output (generate-new-buffer " *fastrevert-bench-vcinfo*"))
         (process (make-process :name "fastrevert-bench-vcinfo" :buffer output :noquery t
                                :sentinel #'ignore :command (list "sh" "-c" script)))
         right every shown-at every-at)
    (fastrevert-bench-vcinfo--wait
     (lambda ()
       (unless (or right (process-live-p process))
         (setq right (funcall done-p (string-trim (with-current-buffer output
                                                      (buffer-string))))
               every (fastrevert-bench-vc--tracker buffers right)))
       (when right
         (unless shown-at
           (when (funcall right shown) (setq shown-at (float-time))))
         (unless every-at
           (when (funcall every) (setq every-at (float-time)))))
       (and shown-at every-at))
     seconds)
    (while (process-live-p process) (accept-process-output process 0.01))
    (unless (zerop (process-exit-status process))
      (fastrevert-bench--loud "%s failed" script))
    (kill-buffer output)
    (cons (and shown-at (* 1000 (- shown-at start)))
          (and every-at (* 1000 (- every-at start))))))

(defun fastrevert-bench-vcinfo--edit (dir buffer seconds)
  "Edit BUFFER's file in DIR from outside; wait for its mode line to show it."
  (fastrevert-bench-vc--sh dir (format "echo edited >> %s"
                                       (shell-quote-argument (buffer-file-name buffer))))
  (fastrevert-bench-vcinfo--wait
   (lambda () (fastrevert-bench-vcinfo--shows-p buffer " Git:main" nil)) seconds))

(defvar fastrevert-bench-vcinfo--branches 0
  "How many branches the runs of `git switch -c' have made.")

(defun fastrevert-bench-vcinfo--run-once (op dir buffers shown seconds)
  "Time one run of OP in DIR; return (SHOWN-MS . EVERY-MS).
OP is `switch', `commit' or `stash'.  SHOWN, one of BUFFERS, is shown
in the selected window, and is the file a commit or stash concerns."
  (pcase op
    ('switch
     (let ((branch (format "topic%d" (cl-incf fastrevert-bench-vcinfo--branches))))
       (prog1 (fastrevert-bench-vcinfo--time-command
               dir (format "git switch -q -c %s" branch) shown buffers
               (lambda (_)
                 (lambda (buffer)
                   (fastrevert-bench-vcinfo--shows-p buffer (concat " Git-" branch) nil)))
               seconds)
         (fastrevert-bench-vcinfo--back-to-main dir buffers))))
    ('commit
     (fastrevert-bench-vcinfo--edit dir shown seconds)
     (fastrevert-bench-vcinfo--time-command
      dir "git commit -qam commit && git rev-parse HEAD" shown buffers
      (lambda (revision)
        (lambda (buffer) (fastrevert-bench-vcinfo--shows-p buffer " Git-main" revision)))
      seconds))
    ('stash
     (fastrevert-bench-vcinfo--edit dir shown seconds)
     (fastrevert-bench-vcinfo--time-command
      dir "git stash -q" shown (list shown)
      (lambda (_) (lambda (buffer) (fastrevert-bench-vcinfo--shows-p buffer " Git-main" nil)))
      seconds))))

(defun fastrevert-bench-vcinfo--quiet ()
  "Wait until fastrevert has had nothing to do for 0.2 s.
It is looked at just before the wait ends, so that work a record
brought in the last wait for events is waited for too, and the 0.2 s
count from the end of any work done while events were waited for: a
refresh of 1,000 buffers that ran in the last wait is not quiet time."
  (let ((since (float-time))
        (deadline (+ (float-time) 60)))
    (while (and (< (float-time) deadline)
                (progn (unless (fastrevert-bench-vc--settled-p) (setq since (float-time)))
                       (< (- (float-time) since) 0.2)))
      (let ((busy fastrevert--main-thread-seconds))
        (read-event nil nil 0.01)
        (unless (eql busy fastrevert--main-thread-seconds)
          (setq since (float-time)))))))

(defun fastrevert-bench-vcinfo--back-to-main (dir buffers)
  "Switch DIR back to branch main, and bring BUFFERS' VC state with it."
  (fastrevert-bench-vc--resync buffers dir "main")
  (fastrevert-bench-vcinfo--quiet))

(defun fastrevert-bench-vcinfo--reset (dir buffers)
  "Bring DIR back to branch main, and BUFFERS with it, with no mode on."
  (fastrevert-bench-vc--sh dir "git stash clear && git checkout -q -f main")
  (fastrevert-bench-vc--resync buffers dir "main"))

(defun fastrevert-bench-vcinfo--percentile (values)
  "Return the 90th percentile of VALUES (nil for a run that never caught up)."
  (if (memq nil values)
      nil
    (let ((sorted (sort (copy-sequence values) #'<)))
      (nth (min (1- (length sorted)) (floor (* 0.9 (length sorted)))) sorted))))

(defun fastrevert-bench-vcinfo--measure (engine dir buffers shown)
  "Measure ENGINE, `stock' or `fastrevert', over BUFFERS in DIR.
Return a plist: :idle (MS-PER-S . CUT) and, for each operation, its
list of (SHOWN-MS . EVERY-MS)."
  (let* ((stock (eq engine 'stock))
         (cap (fastrevert-bench-vcinfo--size :stock-cap))
         (seconds (if stock cap 30))
         (runs (fastrevert-bench-vcinfo--size (if stock :stock-runs :runs)))
         (result nil))
    (fastrevert-bench-vc--with-impl
     (list engine 'external) buffers
     (lambda ()
       (let ((auto-revert-check-vc-info t)
             (auto-revert-interval 1))
         (if stock
             (auto-revert-set-timer)
           ;; The engine takes the settings now, and the refresh of every
           ;; buffer that its first look at the repository brings is over
           ;; before anything is measured.
           (fastrevert--apply-changed-settings)
           (fastrevert-bench-vcinfo--wait
            (lambda () (cl-every #'fastrevert--watching-p buffers)) 300)
           (fastrevert-bench-vcinfo--quiet))
         (fastrevert-bench--progress "check-vc-info: %d files, %s, idle"
                                     (length buffers) engine)
         (setq result
               (list :idle (fastrevert-bench-vcinfo--with-cap (if stock cap 3600)
                             (fastrevert-bench-vcinfo--idle
                              (fastrevert-bench-vcinfo--size :idle-seconds)))))
         (dolist (op '(switch commit stash))
           (fastrevert-bench--progress "check-vc-info: %d files, %s, %s"
                                       (length buffers) engine op)
           (let (times)
             (dotimes (_ runs)
               (push (fastrevert-bench-vcinfo--with-cap (if stock cap 3600)
                       (fastrevert-bench-vcinfo--run-once op dir buffers shown seconds))
                     times)
               (when (and stock (> fastrevert-bench-vcinfo--skipped 0))
                 ;; The tick was cut short: the buffers it skipped are stale.
                 (fastrevert-bench-vcinfo--reset dir buffers)))
             (setq times (nreverse times))
             (fastrevert-bench--progress
              "check-vc-info: %d files, %s, %s: every mode line after %s ms"
              (length buffers) engine op
              (mapconcat (lambda (time) (if (cdr time) (format "%.0f" (cdr time)) "-"))
                         times " "))
             (setq result (plist-put result op times)))))))
    (fastrevert-bench-vcinfo--reset dir buffers)
    result))

;;;; The section

(defun fastrevert-bench-vcinfo--cell (times key)
  "Format the 90th percentile of the KEY (car or cdr) of TIMES, in ms."
  (let ((value (fastrevert-bench-vcinfo--percentile (mapcar key times))))
    (if value (format "%.0f" value) (format ">%d000" (fastrevert-bench-vcinfo--size :stock-cap)))))

(defun fastrevert-bench-vcinfo--idle-cell (idle)
  "Format IDLE, (MS-PER-S . CUT)."
  (if (cdr idle)
      (format ">%.0f" (car idle))
    (format "%.2f" (car idle))))

(defun fastrevert-bench-vcinfo-run (root)
  "Run the `auto-revert-check-vc-info' benchmark under ROOT and print its tables."
  (let (idle-rows command-rows)
    (dolist (count (fastrevert-bench-vcinfo--size :counts))
      (pcase-let* ((process-environment (fastrevert-bench-vc--environment root))
                   (`(,dir . ,buffers) (fastrevert-bench-vc--visit-branches
                                        root (format "vc-info-%d" count) count)))
        (unwind-protect
            (let ((shown (car buffers)))
              (set-window-buffer (selected-window) shown)
              (fastrevert-bench-vcinfo--reset dir buffers)
              (let ((stock (fastrevert-bench-vcinfo--measure 'stock dir buffers shown))
                    (fast (fastrevert-bench-vcinfo--measure 'fastrevert dir buffers shown)))
                (push (list (number-to-string count)
                            (fastrevert-bench-vcinfo--idle-cell (plist-get stock :idle))
                            (fastrevert-bench-vcinfo--idle-cell (plist-get fast :idle)))
                      idle-rows)
                (dolist (op '(switch commit stash))
                  (push (list (number-to-string count)
                              (pcase op
                                ('switch "`git switch -c`")
                                ('commit "`git commit -a`")
                                ('stash "`git stash`"))
                              (fastrevert-bench-vcinfo--cell (plist-get stock op) #'car)
                              (fastrevert-bench-vcinfo--cell (plist-get fast op) #'car)
                              (fastrevert-bench-vcinfo--cell (plist-get stock op) #'cdr)
                              (fastrevert-bench-vcinfo--cell (plist-get fast op) #'cdr))
                        command-rows))))
          (set-window-buffer (selected-window) (get-buffer-create "*scratch*"))
          (fastrevert-bench--kill-buffers buffers)
          (delete-directory dir t))))
    (fastrevert-bench--heading "auto-revert-check-vc-info t")
    (fastrevert-bench--out
     "Every file of a Git repository (10 directories) is visited, one shown in the
selected window; `auto-revert-interval' is 1.  The main thread's ms per second
while nothing changes (%d s):\n\n"
     (fastrevert-bench-vcinfo--size :idle-seconds))
    (fastrevert-bench--print-table '("files" "stock" "fastrevert") (nreverse idle-rows))
    (fastrevert-bench--out
     "Each command runs from outside Emacs.  Milliseconds from its start until the
shown buffer's mode line is right, and until every buffer's `vc-mode' is (for a
stash, the stashed file's); 90th percentile of %d runs (stock: %d).  A stock
tick is cut short after %d s: \">\" marks a cell it cut short.\n\n"
     (fastrevert-bench-vcinfo--size :runs) (fastrevert-bench-vcinfo--size :stock-runs)
     (fastrevert-bench-vcinfo--size :stock-cap))
    (fastrevert-bench--print-table
     '("files" "command" "stock shown" "fastrevert shown" "stock every" "fastrevert every")
     (nreverse command-rows))))

(add-hook 'fastrevert-bench-sections #'fastrevert-bench-vcinfo-run 96)

(provide 'fastrevert-bench-vcinfo)

;;; fastrevert-bench-vcinfo.el ends here
