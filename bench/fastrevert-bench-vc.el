;;; fastrevert-bench-vc.el --- Checkouts, rebases and bursts at scale  -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;;; Commentary:

;; The version-control sections of `make bench':
;;
;; - "checkout": another branch is checked out in a Git repository
;;   whose files are all visited, by an external `git checkout' and
;;   by `magit-checkout' under `magit-auto-revert-mode'.  For stock
;;   Emacs (notification and polling) and fastrevert: seconds until
;;   every text matches and until every `vc-mode' does, the time the
;;   main thread spent in timers and event handlers, and the Git
;;   processes Emacs started (counted by Git's own trace2 events),
;;   against the floor of reverting the same buffers with
;;   `revert-buffer' in a loop;
;; - "rebase": ten commits that all touch the visited files are
;;   rebased; how often each buffer was reverted;
;; - "burst curve": 1,000, 3,000 and 10,000 visited files outside VC,
;;   all rewritten at once, against the floor of `revert-buffer' in a
;;   loop, and where Emacs spends the time as the buffers grow;
;; - a plot of seconds against files (gnuplot, PNG) of the checkout and
;;   burst series, written where FASTREVERT_BENCH_PLOT says.
;;
;; Every Git process in these sections runs with a fixed identity and
;; without the user's configuration.

;;; Code:

(require 'cl-lib)
(require 'autorevert)
(require 'vc-git)
(require 'json)
(require 'fastrevert-bench)

(declare-function fastrevert-mode "fastrevert" (&optional arg))
(declare-function fastrevert-vc-call-with-batch "fastrevert-vc" (buffers function))
(declare-function fastrevert--watching-p "fastrevert-watch" (buffer))
(declare-function magit-checkout "magit-branch" (revision &optional args))
(declare-function magit-auto-revert-mode "magit-autorevert" (&optional arg))
(defvar fastrevert-mode)
(defvar fastrevert--revert-timer)
(defvar fastrevert--pending)
(defvar fastrevert--vc-pending)
(defvar fastrevert-settle-delay)
(defvar magit-auto-revert-mode)
(defvar magit-auto-revert-immediately)

(defconst fastrevert-bench-vc--sizes
  '((:checkout-counts (500 2000) (100))
    (:stock-deadline 30 5)
    (:rebase-files 100 20)
    (:burst-counts (1000 3000 10000) (200 600)))
  "Workload sizes of these benchmarks as (KEY DEFAULT QUICK).")

(defun fastrevert-bench-vc--size (key)
  "Return the size KEY for this run."
  (let ((entry (assq key fastrevert-bench-vc--sizes)))
    (if (fastrevert-bench-quick-p) (nth 2 entry) (nth 1 entry))))

;;;; Repositories

(defvar fastrevert-bench-vc--trace nil
  "Directory where Git writes one trace2 event file per process, or nil.")

(defun fastrevert-bench-vc--environment (home)
  "Return `process-environment' for Git in the benchmarks, with HOME as home.
Git processes Emacs starts write trace2 events into
`fastrevert-bench-vc--trace'."
  (append (list (concat "HOME=" home) "GIT_CONFIG_NOSYSTEM=1"
                "GIT_AUTHOR_NAME=bench" "GIT_AUTHOR_EMAIL=bench@example.org"
                "GIT_COMMITTER_NAME=bench" "GIT_COMMITTER_EMAIL=bench@example.org"
                (concat "GIT_TRACE2_EVENT=" fastrevert-bench-vc--trace))
          process-environment))

(defun fastrevert-bench-vc--sh (dir script &rest args)
  "Run the shell SCRIPT in DIR with ARGS as $1..., untraced; signal if it fails."
  (let ((default-directory dir)
        (process-environment (cons "GIT_TRACE2_EVENT" process-environment)))
    (with-temp-buffer
      (unless (zerop (apply #'call-process "sh" nil t nil "-c" script "sh" args))
        (error "Shell script failed: %s" (buffer-string))))))

(defun fastrevert-bench-vc--sh-while-running (dir script)
  "Run the shell SCRIPT in DIR, untraced, while Emacs handles events.
Return the `float-time' at which SCRIPT ended, as the shell read its
clock: Emacs may notice the exit only later, once it is done with
what it was handling then."
  (let* ((default-directory dir)
         (process-environment (cons "GIT_TRACE2_EVENT" process-environment))
         (clock (make-temp-file "fastrevert-bench-vc-end-"))
         (process (make-process :name "fastrevert-bench-vc" :buffer nil :noquery t
                                :command (list "sh" "-c"
                                               (concat script "\nstatus=$?\n"
                                                       "date +%s.%N > \"$0\"\n"
                                                       "exit $status")
                                               clock))))
    (unwind-protect
        (progn
          (while (process-live-p process)
            (read-event nil nil 0.005))
          (unless (zerop (process-exit-status process))
            (fastrevert-bench--loud "%s failed" script))
          (with-temp-buffer
            (insert-file-contents clock)
            (string-to-number (buffer-string))))
      (delete-file clock))))

(defconst fastrevert-bench-vc--make-branches
  "set -e
git init -q -b main
per=$(( $1 / 10 ))
for d in 0 1 2 3 4 5 6 7 8 9; do
  mkdir dir$d
  i=0
  while [ $i -lt $per ]; do echo \"main $d $i\" > dir$d/file$i.txt; i=$((i+1)); done
done
git add .
git commit -qm main
git checkout -qb other
for f in dir*/*.txt; do echo \"other $f\" > $f; done
git commit -qam other
git checkout -q main
"
  "Shell script that makes a repository of $1 files in 10 directories.
Its branches `main' and `other' differ in every file.")

(defun fastrevert-bench-vc--visit-branches (root name count)
  "Make a repository of COUNT files in ROOT/NAME and visit its files.
The repository is the one `fastrevert-bench-vc--make-branches' makes,
with the Git environment already bound.  Return (DIR . BUFFERS)."
  (let ((dir (file-name-as-directory (expand-file-name name root))))
    (make-directory dir)
    (fastrevert-bench-vc--sh dir fastrevert-bench-vc--make-branches (number-to-string count))
    (cons dir (fastrevert-bench--visit (directory-files-recursively dir "\\.txt\\'")))))

(defun fastrevert-bench-vc--expected-text (buffer branch)
  "Return the text BUFFER's file has on BRANCH in the checkout repository."
  (with-current-buffer buffer
    (let ((relative (file-relative-name buffer-file-name (vc-git-root buffer-file-name))))
      (if (equal branch "other")
          (format "other %s\n" relative)
        (string-match "dir\\([0-9]+\\)/file\\([0-9]+\\)" relative)
        (format "main %s %s\n" (match-string 1 relative) (match-string 2 relative))))))

;;;; Counting Git processes

(defun fastrevert-bench-vc--trace-files ()
  "Return the trace2 event files written so far."
  (directory-files fastrevert-bench-vc--trace t "\\`[^.]"))

(defun fastrevert-bench-vc--clear-trace ()
  "Delete the trace2 event files written so far."
  (mapc #'delete-file (fastrevert-bench-vc--trace-files)))

(defun fastrevert-bench-vc--traced-commands (files)
  "Return the argument lists of the top-level Git processes traced in FILES.
A process that Git itself started (a hook, a helper) is not counted."
  (let (commands)
    (dolist (file files)
      (with-temp-buffer
        (insert-file-contents file)
        (goto-char (point-min))
        (let (sid argv)
          (while (and (not argv) (not (eobp)))
            (let ((event (ignore-errors
                           (json-parse-string (buffer-substring (point) (line-end-position))
                                              :object-type 'plist :array-type 'list))))
              (when event
                (setq sid (or sid (plist-get event :sid)))
                (when (equal (plist-get event :event) "start")
                  (setq argv (plist-get event :argv)))))
            (forward-line 1))
          (when (and argv sid (not (string-match-p "/" sid)))
            (push (cdr argv) commands)))))
    commands))

(defconst fastrevert-bench-vc--vc-commands
  '("ls-files" "ls-tree" "status" "rev-parse" "symbolic-ref")
  "Git commands that a VC refresh starts.")

(defun fastrevert-bench-vc--count-git ()
  "Return (ALL . VC): Git processes traced since the trace was last cleared.
VC counts those of VC refreshes (stock's or fastrevert's batch): every
other process is Magit's own."
  (let ((commands (fastrevert-bench-vc--traced-commands (fastrevert-bench-vc--trace-files))))
    (cons (length commands)
          (cl-count-if (lambda (argv)
                         (let ((args (if (equal (car argv) "--no-pager") (cdr argv) argv)))
                           (and (member (car args) fastrevert-bench-vc--vc-commands)
                                (or (not (equal (car args) "rev-parse"))
                                    (equal (last args) '("HEAD"))))))
                       commands))))

;;;; Main-thread time

(defvar fastrevert-bench-vc--busy 0.0
  "Seconds the main thread spent in timers, events and filters.")

(defvar fastrevert-bench-vc--depth 0
  "How deep the main thread is in the handlers being timed.")

(defun fastrevert-bench-vc--time-handler (function &rest args)
  "Call FUNCTION with ARGS, adding its time to `fastrevert-bench-vc--busy'."
  (if (> fastrevert-bench-vc--depth 0)
      (apply function args)
    (let ((start (float-time))
          (fastrevert-bench-vc--depth 1))
      (unwind-protect (apply function args)
        (setq fastrevert-bench-vc--busy (+ fastrevert-bench-vc--busy (- (float-time) start)))))))

(defconst fastrevert-bench-vc--handlers
  '(timer-event-handler file-notify-handle-event fastrevert--wake-filter)
  "What the main thread runs in response to a change on disk.
Timers (polling, fastrevert's batches), stock file-notify events, and
fastrevert's engine wake-ups.")

(defmacro fastrevert-bench-vc--timing-handlers (&rest body)
  "Run BODY with the time spent in `fastrevert-bench-vc--handlers' counted."
  (declare (indent 0))
  `(unwind-protect
       (progn
         (dolist (function fastrevert-bench-vc--handlers)
           (advice-add function :around #'fastrevert-bench-vc--time-handler))
         ,@body)
     (dolist (function fastrevert-bench-vc--handlers)
       (advice-remove function #'fastrevert-bench-vc--time-handler))))

;;;; Watching buffers catch up

(defun fastrevert-bench-vc--tracker (buffers done-p)
  "Return a predicate: does DONE-P hold for every one of BUFFERS?
It resumes at the buffer last seen not done, since a buffer once done
stays so."
  (let ((tail buffers)
        (count (length buffers)))
    (lambda ()
      (let ((checked 0)
            (found nil))
        (while (and (not found) (< checked count))
          (unless tail (setq tail buffers))
          (if (funcall done-p (car tail))
              (setq tail (cdr tail)
                    checked (1+ checked))
            (setq found t)))
        (not found)))))

(defun fastrevert-bench-vc--mode-line (buffer)
  "Return BUFFER's `vc-mode' as text."
  (substring-no-properties (or (buffer-local-value 'vc-mode buffer) "")))

(defun fastrevert-bench-vc--settled-p ()
  "Return non-nil if fastrevert has nothing pending."
  (not (and (bound-and-true-p fastrevert-mode)
            (or fastrevert--revert-timer
                (> (hash-table-count fastrevert--pending) 0)
                (> (hash-table-count fastrevert--vc-pending) 0)))))

;;;; Checkout

(defun fastrevert-bench-vc--resync (buffers dir branch)
  "Check out BRANCH in DIR and bring BUFFERS up to date, with no mode on."
  (fastrevert-bench-vc--sh dir (format "git checkout -q %s" branch))
  (dolist (buffer buffers)
    (with-current-buffer buffer
      (revert-buffer 'ignore-auto 'dont-ask 'preserve-modes)))
  ;; The batch gives every buffer what `vc-refresh-state' gives it (as
  ;; the differential tests check), with two Git processes in all.
  (fastrevert-vc-call-with-batch
   buffers (lambda ()
             (dolist (buffer buffers)
               (with-current-buffer buffer
                 (vc-refresh-state))))))

(defun fastrevert-bench-vc--stale-vc (buffers)
  "Return how many of BUFFERS have a `vc-mode' other than the `other' branch's."
  (cl-count-if-not (lambda (buffer)
                     (equal (fastrevert-bench-vc--mode-line buffer) " Git-other"))
                   buffers))

(defun fastrevert-bench-vc--floor (buffers dir &optional refresh-vc)
  "Time reverting BUFFERS in a loop after DIR's checkout of `other'.
With REFRESH-VC, each revert is followed by the stock way to bring the
buffer's `vc-mode' up to date: VC's cached state of its file is
cleared and `vc-refresh-state' runs.  Return (SECONDS STALE-VC GIT):
STALE-VC counts the buffers whose `vc-mode' still names the old
branch (without REFRESH-VC, all of them: `revert-buffer' keeps VC's
cached state of the file), GIT the Git processes that started.  Then
return to `main'."
  (fastrevert-bench-vc--sh dir "git checkout -q other")
  (fastrevert-bench-vc--clear-trace)
  (garbage-collect)
  (let ((start (float-time)))
    (dolist (buffer buffers)
      (with-current-buffer buffer
        (revert-buffer 'ignore-auto 'dont-ask 'preserve-modes)
        (when refresh-vc
          (vc-file-clearprops buffer-file-name)
          (vc-refresh-state))))
    (prog1 (list (- (float-time) start) (fastrevert-bench-vc--stale-vc buffers)
                 (car (fastrevert-bench-vc--count-git)))
      (fastrevert-bench-vc--resync buffers dir "main"))))

(defun fastrevert-bench-vc--with-impl (impl buffers thunk)
  "Call THUNK with auto-revert for BUFFERS run by IMPL, then turn it off.
IMPL is a list (ENGINE TRIGGER): ENGINE is `stock-notify',
`stock-poll' or `fastrevert'; TRIGGER is `external' (Global
Auto-Revert mode) or `magit' (`magit-auto-revert-mode')."
  (pcase-let ((`(,engine ,trigger) impl)
              (old-notify auto-revert-use-notify))
    (let ((auto-revert-verbose nil)
          (auto-revert-interval (if (eq engine 'stock-poll) 1 auto-revert-interval))
          (auto-revert-stop-on-user-input nil)
          (magit-auto-revert-immediately t))
      (unwind-protect
          (progn
            (fastrevert-bench--set-custom 'auto-revert-use-notify (not (eq engine 'stock-poll)))
            (when (eq engine 'fastrevert) (fastrevert-mode 1))
            (if (eq trigger 'magit)
                (magit-auto-revert-mode 1)
              (global-auto-revert-mode 1))
            (if (eq engine 'fastrevert)
                (let ((deadline (+ (float-time) 300)))
                  (while (and (< (float-time) deadline)
                              (not (and (cl-every #'fastrevert--watching-p buffers)
                                        (fastrevert-bench-vc--settled-p))))
                    (accept-process-output nil 0.01)))
              (auto-revert-buffers))
            (funcall thunk))
        (when (bound-and-true-p magit-auto-revert-mode) (magit-auto-revert-mode -1))
        (global-auto-revert-mode -1)
        (dolist (buffer buffers)
          (with-current-buffer buffer (when auto-revert-mode (auto-revert-mode -1))))
        (when (eq engine 'fastrevert) (fastrevert-mode -1))
        (fastrevert-bench--set-custom 'auto-revert-use-notify old-notify)))))

(defun fastrevert-bench-vc--follow-magit-process (on-exit)
  "Follow the Git process a Magit command left running, if any.
Magit 4 runs some commands' Git asynchronously and refreshes, reverting
buffers, from the process's sentinel: the sentinel's time counts as the
main thread's, and ON-EXIT is called once it has run on the ended
process, Magit's own refresh done."
  (let ((process (bound-and-true-p magit-this-process)))
    (when (process-live-p process)
      (add-function :around (process-sentinel process) #'fastrevert-bench-vc--time-handler)
      (add-function :after (process-sentinel process)
                    (lambda (process _event)
                      (unless (process-live-p process)
                        (funcall on-exit)))))))

(defun fastrevert-bench-vc--checkout-once (impl buffers dir deadline)
  "Check out `other' in DIR under IMPL and time BUFFERS catching up.
Give up after DEADLINE seconds.  Return a plist: :text and :vc
\(seconds until every text and every `vc-mode' matched, nil if not
within DEADLINE), :git-seconds (until the checkout's Git process
ended, or for a Magit checkout until Magit's own refresh after it did),
:stale-text, :stale-vc, :busy-ms (main thread), :git and
:vc-git (processes)."
  (let* ((expected (let ((table (make-hash-table :test #'eq)))
                     (dolist (buffer buffers table)
                       (puthash buffer (fastrevert-bench-vc--expected-text buffer "other")
                                table))))
         ;; The texts expected are known before the clock starts: the
         ;; checks while it runs must cost little next to what they time.
         (text-right (lambda (buffer)
                       (with-current-buffer buffer
                         (equal (buffer-substring-no-properties (point-min) (point-max))
                                (gethash buffer expected)))))
         (text-done (fastrevert-bench-vc--tracker buffers text-right))
         (vc-done (fastrevert-bench-vc--tracker
                   buffers (lambda (buffer)
                             (equal (fastrevert-bench-vc--mode-line buffer) " Git-other"))))
         (result nil))
    (fastrevert-bench-vc--with-impl
     impl buffers
     (lambda ()
       (fastrevert-bench-vc--clear-trace)
       (let ((fastrevert-bench-vc--busy 0.0)
             (start nil) git-end text-at vc-at)
         (garbage-collect)
         (fastrevert-bench-vc--timing-handlers
           ;; fastrevert refreshes VC state once every text is reverted;
           ;; the texts are all right by the time that starts.
           (advice-add 'fastrevert-vc-call-with-batch :before
                       (lambda (&rest _)
                         (when (and start (not text-at) (funcall text-done))
                           (setq text-at (float-time))))
                       '((name . fastrevert-bench-vc-texts)))
           (unwind-protect
               ;; Magit's refresh, run from a process sentinel with Magit
               ;; 4, works in the directory the command started from.
               (let ((default-directory dir))
                 (setq start (float-time))
                 (if (eq (cadr impl) 'magit)
                     (let ((begin (float-time)))
                       (magit-checkout "other")
                       (setq fastrevert-bench-vc--busy
                             (+ fastrevert-bench-vc--busy (- (float-time) begin)))
                       ;; The row is judged from the end of Magit's own
                       ;; refresh: Magit 3 runs `git checkout' and refreshes
                       ;; before the command returns; Magit 4 refreshes
                       ;; from the sentinel of its asynchronous Git.
                       (if (process-live-p (bound-and-true-p magit-this-process))
                           (fastrevert-bench-vc--follow-magit-process
                            (lambda () (setq git-end (float-time))))
                         (setq git-end (float-time))))
                   (setq git-end (fastrevert-bench-vc--sh-while-running
                                  dir "git checkout -q other")))
                 (let ((end (+ start deadline))
                       (done (lambda ()
                               (and vc-at git-end (fastrevert-bench-vc--settled-p)))))
                   (while (and (< (float-time) end) (not (funcall done)))
                     (unless text-at
                       (when (funcall text-done) (setq text-at (float-time))))
                     (when (and text-at (not vc-at) (funcall vc-done))
                       (setq vc-at (float-time)))
                     (unless (funcall done)
                       (read-event nil nil 0.01)))))
             (advice-remove 'fastrevert-vc-call-with-batch 'fastrevert-bench-vc-texts)))
         (let ((git (fastrevert-bench-vc--count-git)))
           (setq result
                 (list :text (and text-at (- text-at start))
                       :vc (and vc-at (- vc-at start))
                       :git-seconds (and git-end (- git-end start))
                       :stale-text (cl-count-if-not text-right buffers)
                       :stale-vc (cl-count-if-not
                                  (lambda (buffer)
                                    (equal (fastrevert-bench-vc--mode-line buffer) " Git-other"))
                                  buffers)
                       :busy-ms (* 1000 fastrevert-bench-vc--busy)
                       :git (car git) :vc-git (cdr git)))))))
    (fastrevert-bench-vc--resync buffers dir "main")
    result))

(defconst fastrevert-bench-vc--checkout-impls
  '((stock-notify external) (stock-poll external) (fastrevert external)
    (stock-notify magit) (fastrevert magit))
  "The implementations of the checkout table, as (ENGINE TRIGGER).")

(defun fastrevert-bench-vc--impl-name (impl)
  "Return a readable name for IMPL, a list (ENGINE TRIGGER)."
  (pcase impl
    ('(stock-notify external) "stock notify, git checkout")
    ('(stock-poll external) "stock poll 1 s, git checkout")
    ('(fastrevert external) "fastrevert, git checkout")
    ('(stock-notify magit) "stock, magit-checkout")
    ('(fastrevert magit) "fastrevert, magit-checkout")))

(defun fastrevert-bench-vc--magit-available-p ()
  "Load Magit from Debian's elpa-magit if possible; return non-nil if loaded.
Loading it turns `magit-auto-revert-mode' on; it is turned off again,
for the rows that do not use Magit."
  (when (fastrevert-bench-require-debian-package 'magit)
    (when (bound-and-true-p magit-auto-revert-mode) (magit-auto-revert-mode -1))
    t))

(defvar fastrevert-bench-vc-results nil
  "Rows of the last checkout and burst runs, for the plot.
Each is (SERIES FILES SECONDS).")

(defun fastrevert-bench-vc--run-checkout (root)
  "Run the checkout benchmark under ROOT and print its table."
  (let ((magit (fastrevert-bench-vc--magit-available-p))
        (deadline (fastrevert-bench-vc--size :stock-deadline))
        rows floors)
    (dolist (count (fastrevert-bench-vc--size :checkout-counts))
      (pcase-let* ((process-environment (fastrevert-bench-vc--environment root))
                   (`(,dir . ,buffers) (fastrevert-bench-vc--visit-branches
                                        root (format "checkout-%d" count) count)))
        (unwind-protect
            (progn
              (fastrevert-bench-vc--resync buffers dir "main")
              (pcase-let* ((`(,floor ,floor-stale ,_) (fastrevert-bench-vc--floor buffers dir))
                           (`(,vc-floor ,vc-floor-stale ,vc-floor-git)
                            (fastrevert-bench-vc--floor buffers dir t)))
                (push (list "floor: revert-buffer loop" count floor) fastrevert-bench-vc-results)
                (push (list "VC floor: revert, clear VC state, vc-refresh-state" count vc-floor)
                      fastrevert-bench-vc-results)
                (push (list count floor floor-stale vc-floor vc-floor-stale vc-floor-git) floors)
                (when (> vc-floor-stale 0)
                  (fastrevert-bench--loud "the VC floor left %d vc-modes stale" vc-floor-stale))
                (dolist (impl fastrevert-bench-vc--checkout-impls)
                  (when (and (or magit (not (eq (cadr impl) 'magit)))
                             ;; One tick of stock polling refreshes every
                             ;; buffer's VC state with four Git processes
                             ;; each: past the smallest size, a tick alone
                             ;; outlasts the deadline many times over.
                             (or (not (eq (car impl) 'stock-poll))
                                 (= count (car (fastrevert-bench-vc--size :checkout-counts)))))
                    (fastrevert-bench--progress "checkout: %d files, %s"
                                                count (fastrevert-bench-vc--impl-name impl))
                    (let ((result (fastrevert-bench-vc--checkout-once
                                   impl buffers dir
                                   (if (eq (car impl) 'fastrevert) 120 deadline))))
                      (when (and (eq (car impl) 'fastrevert)
                                 (> (+ (plist-get result :stale-text)
                                       (plist-get result :stale-vc))
                                    0))
                        (fastrevert-bench--loud "%s left %d texts and %d vc-modes stale"
                                                (fastrevert-bench-vc--impl-name impl)
                                                (plist-get result :stale-text)
                                                (plist-get result :stale-vc)))
                      ;; A run that never caught up has no point on the plot.
                      (when (plist-get result :vc)
                        (push (list (fastrevert-bench-vc--impl-name impl) count
                                    (plist-get result :vc))
                              fastrevert-bench-vc-results))
                      (push (list count impl floor result vc-floor) rows))))))
          (fastrevert-bench--kill-buffers buffers)
          (delete-directory dir t))))
    (fastrevert-bench--heading "Checkout in a Git repository")
    (fastrevert-bench--out
     "Every file of a repository (10 directories) is visited; another branch, which
changes every file, is checked out by `git checkout' from outside Emacs, or by
`magit-checkout' under `magit-auto-revert-mode'.  Seconds until every buffer's
text matches its file and until every `vc-mode' names the new branch
(\"never\" when not within %d s, with the stale counts), the main thread's
time in timers, file-notify events, fastrevert's wake-ups and the Magit
command itself (with its process sentinel where Magit runs Git asynchronously,
as Magit 4 does), and Git processes Emacs started (all of them, and those of
VC refreshes; Magit's own make the difference).  The floor is `revert-buffer'
of every buffer in a loop, with VC on, after the same checkout; ratios are
against it.  The rows are timed from the start of the checkout, the floor from
its end: \"Git s\" is when the checkout's Git process ended, and for the Magit
rows when Magit's own refresh after it ended (the command's return, or with
Magit 4 its process sentinel's), and \"after Git / floor\" the time from then
until every `vc-mode' was right, against the floor.  The floor leaves every
`vc-mode' as it was: `revert-buffer' keeps VC's cached state of the file.  The
VC floor is what brings them right the stock way: each buffer reverted, its
file's VC state cleared and `vc-refresh-state' run, one after another; \"vc /
VC floor\" compares with it.  Stock polling runs at the smallest size only: one
tick refreshes every buffer's VC state with four Git processes each.%s\n\n"
     deadline (if magit "" "  Magit is not installed: no Magit rows."))
    (fastrevert-bench--print-table
     '("files" "implementation" "texts s" "vc-modes s" "vc / floor" "Git s"
       "after Git / floor" "vc / VC floor" "stale text/vc" "main-thread ms" "git processes"
       "of them VC")
     (mapcar
      (lambda (row)
        (pcase-let ((`(,count ,impl ,floor ,result ,vc-floor) row))
          (let ((vc (plist-get result :vc)))
            (list (number-to-string count) (fastrevert-bench-vc--impl-name impl)
                  (let ((text (plist-get result :text))) (if text (format "%.2f" text) "never"))
                  (if vc (format "%.2f" vc) "never")
                  (if vc (format "%.1fx" (/ vc (max floor 1e-6))) "-")
                  (let ((git (plist-get result :git-seconds)))
                    (if git (format "%.2f" git) "-"))
                  (let ((git (plist-get result :git-seconds)))
                    (if (and vc git)
                        (format "%.1fx" (/ (max 0 (- vc git)) (max floor 1e-6)))
                      "-"))
                  (if vc (format "%.2fx" (/ vc (max vc-floor 1e-6))) "-")
                  (format "%d/%d" (plist-get result :stale-text) (plist-get result :stale-vc))
                  (format "%.0f" (plist-get result :busy-ms))
                  (number-to-string (plist-get result :git))
                  (number-to-string (plist-get result :vc-git))))))
      (nreverse rows)))
    (fastrevert-bench--out
     "Floors: %s\n\n"
     (mapconcat (lambda (entry)
                  (pcase-let ((`(,count ,floor ,floor-stale ,vc-floor ,vc-floor-stale ,vc-git)
                               entry))
                    (format (concat "%d files: revert loop %.2f s (%d of %d vc-modes left stale);"
                                    " VC floor %.2f s (%d stale, %d Git processes)")
                            count floor floor-stale count vc-floor vc-floor-stale vc-git)))
                (nreverse floors) "; "))))

;;;; Rebase

(defconst fastrevert-bench-vc--make-topic
  "set -e
git init -q -b main
i=0
while [ $i -lt $1 ]; do echo base > file$i.txt; i=$((i+1)); done
git add .
git commit -qm base
git checkout -qb topic
for c in 1 2 3 4 5 6 7 8 9 10; do
  for f in file*.txt; do echo \"commit $c\" >> $f; done
  git commit -qam \"commit $c\"
done
git checkout -q main
echo elsewhere > other.log
git add other.log
git commit -qm elsewhere
git checkout -q topic
"
  "Shell script for a branch of ten commits that each touch all $1 files.")

(defun fastrevert-bench-vc--rebase-once (engine buffers dir)
  "Rebase DIR's topic branch under ENGINE; return a plist of what BUFFERS saw.
:reverts is the list of revert counts per buffer, :seconds the time
until every buffer was reverted and up to date (nil if not within the
deadline), :git the Git processes Emacs started."
  (let ((counts (make-hash-table :test #'eq))
        (final (with-temp-buffer
                 (insert "base\n")
                 (dotimes (c 10) (insert (format "commit %d\n" (1+ c))))
                 (buffer-string)))
        result)
    (fastrevert-bench-vc--with-impl
     (list engine 'external) buffers
     (lambda ()
       (let* ((count (lambda () (puthash (current-buffer) (1+ (gethash (current-buffer) counts 0))
                                         counts)))
              (_ (fastrevert-bench-vc--clear-trace))
              (start (float-time))
              (end (+ start (fastrevert-bench-vc--size :stock-deadline)))
              done-at)
         (add-hook 'after-revert-hook count)
         (unwind-protect
             (progn
               (fastrevert-bench-vc--sh-while-running dir "git rebase -q main")
               (while (and (< (float-time) end) (not done-at))
                 (if (and (cl-every (lambda (buffer)
                                      (and (gethash buffer counts)
                                           (with-current-buffer buffer
                                             (equal (buffer-substring-no-properties
                                                     (point-min) (point-max))
                                                    final))))
                                    buffers)
                          (fastrevert-bench-vc--settled-p))
                     (setq done-at (float-time))
                   (read-event nil nil 0.01)))
               ;; Late reverts would still count.
               (let ((quiet (+ (float-time) 1)))
                 (while (< (float-time) quiet) (read-event nil nil 0.01))))
           (remove-hook 'after-revert-hook count))
         (setq result (list :reverts (mapcar (lambda (buffer) (gethash buffer counts 0)) buffers)
                            :seconds (and done-at (- done-at start))
                            :stale (cl-count-if-not
                                    (lambda (buffer)
                                      (with-current-buffer buffer
                                        (equal (buffer-substring-no-properties (point-min)
                                                                               (point-max))
                                               final)))
                                    buffers)
                            :git (car (fastrevert-bench-vc--count-git)))))))
    (fastrevert-bench-vc--sh dir "git reset -q --hard ORIG_HEAD")
    (dolist (buffer buffers)
      (with-current-buffer buffer (revert-buffer 'ignore-auto 'dont-ask 'preserve-modes)))
    result))

(defun fastrevert-bench-vc--run-rebase (root)
  "Run the rebase benchmark under ROOT and print its table."
  (let* ((count (fastrevert-bench-vc--size :rebase-files))
         (dir (file-name-as-directory (expand-file-name "rebase" root)))
         (process-environment (fastrevert-bench-vc--environment root))
         rows buffers)
    (make-directory dir)
    (fastrevert-bench-vc--sh dir fastrevert-bench-vc--make-topic (number-to-string count))
    (setq buffers (fastrevert-bench--visit (directory-files dir t "\\.txt\\'")))
    (unwind-protect
        (progn
          (fastrevert-bench-vc--resync buffers dir "topic")
          (dolist (engine '(stock-notify stock-poll fastrevert))
            (fastrevert-bench--progress "rebase: %d files, %s" count engine)
            (push (cons engine (fastrevert-bench-vc--rebase-once engine buffers dir)) rows)))
      (fastrevert-bench--kill-buffers buffers)
      (delete-directory dir t))
    (fastrevert-bench--heading (format "Rebase: ten commits that each touch %d visited files"
                                       count))
    (fastrevert-bench--out
     "`git rebase' from outside Emacs replays ten commits, each rewriting every
visited file.  How often each buffer was reverted (once is right: the files end
as the last commit left them), seconds until every buffer was reverted and up
to date (\"never\" when not within %d s), buffers left stale, and Git processes
Emacs started.\n\n" (fastrevert-bench-vc--size :stock-deadline))
    (fastrevert-bench--print-table
     '("implementation" "reverts per buffer (min-max)" "mean" "seconds" "stale"
       "git processes")
     (mapcar (lambda (row)
               (let ((reverts (plist-get (cdr row) :reverts))
                     (seconds (plist-get (cdr row) :seconds)))
                 (list (symbol-name (car row))
                       (format "%d-%d" (apply #'min reverts) (apply #'max reverts))
                       (format "%.2f" (/ (float (apply #'+ reverts)) (length reverts)))
                       (if seconds (format "%.2f" seconds) "never")
                       (number-to-string (plist-get (cdr row) :stale))
                       (number-to-string (plist-get (cdr row) :git)))))
             (nreverse rows)))))

;;;; Burst curve

(defun fastrevert-bench-vc--make-tree (dir count)
  "Create COUNT small files in 10 directories under DIR; return their names."
  (fastrevert-bench-vc--sh
   dir "for d in 0 1 2 3 4 5 6 7 8 9; do mkdir dir$d; i=0; \
while [ $i -lt $(( $1 / 10 )) ]; do echo old > dir$d/file$i.txt; i=$((i+1)); done; done"
   (number-to-string count))
  (directory-files-recursively dir "\\.txt\\'"))

(defun fastrevert-bench-vc--rewrite-tree (dir generation)
  "Rewrite every file under DIR from another program with GENERATION's text."
  (fastrevert-bench-vc--sh dir "for f in dir*/*.txt; do echo \"burst $1\" > $f; done"
                           (number-to-string generation)))

(defun fastrevert-bench-vc--burst-once (buffers dir generation impl)
  "Rewrite DIR's files with GENERATION's text; time BUFFERS catching up under IMPL.
IMPL is `floor' (`revert-buffer' on each buffer in a loop) or
`fastrevert'.  Return (SECONDS GCS GC-SECONDS CPU-SECONDS STALE)."
  (let* ((text (format "burst %d\n" generation))
         (done (fastrevert-bench-vc--tracker
                buffers (lambda (buffer)
                          (with-current-buffer buffer
                            (equal (buffer-substring-no-properties (point-min) (point-max))
                                   text)))))
         result)
    (let ((measure
           (lambda ()
             (fastrevert-bench-vc--rewrite-tree dir generation)
             (garbage-collect)
             (let ((start (float-time))
                   (cpu (float-time (get-internal-run-time)))
                   (gcs gcs-done)
                   (gc-time gc-elapsed))
               (if (eq impl 'floor)
                   (dolist (buffer buffers)
                     (with-current-buffer buffer
                       (revert-buffer 'ignore-auto 'dont-ask 'preserve-modes)))
                 (let ((end (+ start 600)))
                   (while (and (< (float-time) end) (not (funcall done)))
                     (read-event nil nil 0.01))))
               (setq result (list (- (float-time) start) (- gcs-done gcs) (- gc-elapsed gc-time)
                                  (- (float-time (get-internal-run-time)) cpu)
                                  (cl-count-if-not
                                   (lambda (buffer)
                                     (with-current-buffer buffer
                                       (equal (buffer-substring-no-properties (point-min)
                                                                              (point-max))
                                              text)))
                                   buffers)))))))
      (if (eq impl 'floor)
          (funcall measure)
        (let ((fastrevert-settle-delay 0.03))
          (fastrevert-bench-vc--with-impl '(fastrevert external) buffers measure))))
    result))

(defun fastrevert-bench-vc--run-burst-curve (root)
  "Run the burst curve under ROOT and print its table."
  (let ((generation 0)
        rows)
    (dolist (count (fastrevert-bench-vc--size :burst-counts))
      (let* ((dir (file-name-as-directory (expand-file-name (format "burst-%d" count) root)))
             (visit-start (progn (make-directory dir) (float-time)))
             (buffers (fastrevert-bench--visit (fastrevert-bench-vc--make-tree dir count))))
        (fastrevert-bench--progress "burst curve: visited %d files in %.1f s"
                                    count (- (float-time) visit-start))
        (unwind-protect
            (dolist (impl '(floor fastrevert))
              (fastrevert-bench--progress "burst curve: %d files, %s" count impl)
              (let ((result (fastrevert-bench-vc--burst-once buffers dir (cl-incf generation)
                                                             impl)))
                (when (> (nth 4 result) 0)
                  (fastrevert-bench--loud "%s left %d of %d buffers stale"
                                          impl (nth 4 result) count))
                (push (list (if (eq impl 'floor) "burst floor: revert-buffer loop"
                              "burst: fastrevert")
                            count (nth 0 result))
                      fastrevert-bench-vc-results)
                (push (cons count (cons impl result)) rows)))
          (fastrevert-bench--kill-buffers buffers)
          (delete-directory dir t))))
    (setq rows (nreverse rows))
    (fastrevert-bench--heading "Burst curve: visited files outside VC, all rewritten at once")
    (fastrevert-bench--out
     "Files in 10 directories, no version control.  The floor reverts every buffer
with `revert-buffer' in a loop; fastrevert is timed until every buffer matches.
Seconds, ms per file, garbage collections (count and seconds, included in the
seconds) and the CPU time of the whole Emacs process (the engine thread too).
The last column compares ms per file with the smallest burst of the same row
kind.\n\n")
    (let ((base (make-hash-table :test #'eq)))
      (fastrevert-bench--print-table
       '("files" "implementation" "seconds" "ms per file" "GCs" "GC s" "CPU s"
         "per file / smallest")
       (mapcar (lambda (row)
                 (pcase-let* ((`(,count ,impl ,seconds ,gcs ,gc-seconds ,cpu ,_stale) row)
                              (per-file (/ (* 1000 seconds) count)))
                   (unless (gethash impl base) (puthash impl per-file base))
                   (list (number-to-string count)
                         (if (eq impl 'floor) "floor: revert-buffer loop" "fastrevert")
                         (format "%.2f" seconds) (format "%.3f" per-file)
                         (number-to-string gcs) (format "%.2f" gc-seconds) (format "%.2f" cpu)
                         (format "%.2fx" (/ per-file (gethash impl base))))))
               rows)))))

;;;; Plot

(defun fastrevert-bench-vc--plot ()
  "Plot `fastrevert-bench-vc-results' as seconds against files, with gnuplot.
The PNG goes where the environment variable FASTREVERT_BENCH_PLOT
says; nothing is plotted when it is unset or gnuplot is missing."
  (let ((output (getenv "FASTREVERT_BENCH_PLOT"))
        (series (delete-dups (mapcar #'car (reverse fastrevert-bench-vc-results)))))
    (cond
     ((or (null output) (string-empty-p output)) nil)
     ((not (executable-find "gnuplot"))
      (fastrevert-bench--loud "gnuplot is not installed; no plot"))
     (t
      (let ((data (make-temp-file "fastrevert-bench-plot-" nil ".dat")))
        (unwind-protect
            (progn
              (with-temp-file data
                (dolist (name series)
                  (insert (format "# %s\n" name))
                  (dolist (entry (sort (cl-remove-if-not
                                        (lambda (entry) (equal (car entry) name))
                                        (copy-sequence fastrevert-bench-vc-results))
                                       (lambda (a b) (< (nth 1 a) (nth 1 b)))))
                    (insert (format "%d %.4f\n" (nth 1 entry) (nth 2 entry))))
                  (insert "\n\n")))
              (with-temp-buffer
                (insert (format "set terminal pngcairo size 1000,640 font ',10'
set output %S
set title 'Seconds until every buffer matches (stock Emacs %s and fastrevert)'
set xlabel 'visited files'
set ylabel 'seconds'
set logscale xy
set key outside right
set grid
plot %s\n"
                                (expand-file-name output) emacs-version
                                (mapconcat (lambda (index)
                                             (format "%S index %d with linespoints title %S"
                                                     data index (nth index series)))
                                           (number-sequence 0 (1- (length series))) ", ")))
                (unless (zerop (call-process-region (point-min) (point-max) "gnuplot"
                                                    nil '(t t) nil))
                  (fastrevert-bench--loud "gnuplot failed: %s" (buffer-string))))
              (fastrevert-bench--out "Plot: %s\n\n" output))
          (delete-file data)))))))

(defun fastrevert-bench-vc--run (root)
  "Run the version-control and scale benchmarks under ROOT, then plot them."
  (let ((fastrevert-bench-vc--trace (make-temp-file "fastrevert-bench-trace-" t)))
    (setq fastrevert-bench-vc-results nil)
    (unwind-protect
        (progn
          (fastrevert-bench-vc--run-checkout root)
          (fastrevert-bench-vc--run-rebase root)
          (fastrevert-bench-vc--run-burst-curve root)
          (fastrevert-bench-vc--plot))
      (delete-directory fastrevert-bench-vc--trace t))))

(add-hook 'fastrevert-bench-sections #'fastrevert-bench-vc--run 95)

(provide 'fastrevert-bench-vc)

;;; fastrevert-bench-vc.el ends here
