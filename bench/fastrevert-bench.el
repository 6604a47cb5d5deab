;;; fastrevert-bench.el --- Benchmarks of stock Emacs and fastrevert  -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; Keywords: files, processes, tools

;;; Commentary:

;; This file is the harness behind `make bench'.  It runs every
;; benchmark in one batch Emacs and prints plain-text (Markdown) tables
;; to standard output.  Progress notes go to standard error.  `make
;; bench' runs `fastrevert-bench-run' from the repository root in a
;; batch Emacs started with -Q, with the `lisp' and `bench' directories
;; on `load-path' (bench/README.md has the exact command line).
;;
;; Set the environment variable FASTREVERT_BENCH_QUICK=1 for a smoke
;; run with small sizes and few repetitions.  Benchmarks only report;
;; they never pass or fail on a time.  They do report loudly when a
;; result is wrong, for example when a buffer does not hold exactly
;; the bytes of the file that was read into it.
;;
;; Benchmarks measured:
;;
;; - `tick': the main-thread cost of one auto-revert polling tick
;;   (`auto-revert-buffers') with 1, 100 and 1,000 visited files and
;;   nothing changed on disk.
;; - `tick-elp': the same tick for 1,000 files under elp, printed in
;;   the usual elp results format.
;; - `output': 50 MiB of process output into a buffer, against
;;   `call-process' and `insert-file-contents' of the same bytes.
;; - `spawn': the cost of starting many tiny processes (`ls /').
;;
;; Implementations and columns
;; ---------------------------
;;
;; A table row is one workload (a number of files, or a method), and
;; a table has one column, or group of columns, per implementation
;; variant.  Two registries drive this:
;;
;; - `fastrevert-bench-define-implementation' IMPL AVAILABLE-P
;;   registers an implementation.  AVAILABLE-P is a function of no
;;   arguments; columns of IMPL are run and printed only when it
;;   returns non-nil.  `stock' is always available; `fastrevert' is
;;   available when the feature `fastrevert' is loaded, which the
;;   harness tries with a guarded `require' before it starts.
;;
;; - `fastrevert-bench-define' CASE COLUMN &rest PROPS registers (or
;;   replaces) COLUMN of benchmark CASE.  PROPS is a plist:
;;     :impl      the implementation symbol the column belongs to;
;;     :header    the column title printed in the tables;
;;     :function  the function that measures one cell.
;;   Columns appear in registration order.
;;
;; The measuring function of each CASE is called as follows.  It must
;; leave global state as it found it (modes off, variables restored),
;; and it may return nil when a row does not apply to it, which
;; prints as "-".
;;
;; - `tick': (FUNCTION BUFFERS TICKS).  BUFFERS are live buffers
;;   visiting unchanged files in one directory; auto-revert is off
;;   when it is called.  It times TICKS idle ticks and returns a plist
;;   with :times (a list of seconds, one per tick), :triple (the
;;   `benchmark-run' triple over all ticks), :watched (how many
;;   buffers had a file watch) and :incomplete (how many ticks did not
;;   reach every buffer).  `fastrevert-bench--time-ticks' builds most
;;   of that plist.
;; - `tick-elp': (FUNCTION BUFFERS TICKS).  It returns the elp report
;;   as a string.
;; - `output': (FUNCTION ROW FILE RUNS).  ROW is a key of
;;   `fastrevert-bench-output-rows'.  It reads FILE's bytes RUNS times,
;;   each into a fresh buffer, and returns the plist of
;;   `fastrevert-bench-measure-into-buffer', which also checks sizes.
;; - `spawn': (FUNCTION ROW COUNT).  ROW is a key of
;;   `fastrevert-bench-spawn-rows'.  It runs `ls /' COUNT times and
;;   returns a plist with :triple and :bad (runs without output).
;;
;; So, to add a fastrevert column once `fastrevert-mode' exists, write
;; for example:
;;
;;   (fastrevert-bench-define 'tick 'fastrevert
;;     :impl 'fastrevert :header "fastrevert"
;;     :function #'my-fastrevert-tick-function)
;;
;; and declare any fastrevert function it calls with
;; `declare-function', so that this file still compiles cleanly when
;; fastrevert is absent.

;;; Code:

(require 'autorevert)
(require 'benchmark)
(require 'cl-lib)
(require 'elp)
(require 'package)
(require 'subr-x)

(defvar vc-handled-backends)

;;;; Settings

(defvar fastrevert-bench-coding 'utf-8-unix
  "Coding system bound as `coding-system-for-read' for every read.
All process-output methods decode with the same coding system, so
their times are comparable.  The generated data are ASCII text.")

(defvar fastrevert-bench-process-timeout 120
  "Seconds after which waiting for one benchmark process gives up.")

(defconst fastrevert-bench--sizes
  '((:file-counts (1 100 1000) (1 100 1000))
    (:ticks 50 5)
    (:elp-files 1000 1000)
    (:output-bytes 52428800 5242880)
    (:output-runs 5 1)
    (:spawn-count 1000 100))
  "Workload sizes as (KEY DEFAULT QUICK).
QUICK applies when FASTREVERT_BENCH_QUICK is set.")

(defun fastrevert-bench-quick-p ()
  "Return non-nil when FASTREVERT_BENCH_QUICK asks for a smoke run."
  (let ((value (getenv "FASTREVERT_BENCH_QUICK")))
    (and value (not (member value '("" "0" "no" "false"))))))

(defun fastrevert-bench-require-debian-package (feature)
  "Load FEATURE, built into Emacs or from Debian's elpa-* packages.
Return non-nil if it is loaded; nil, loading nothing, when it is not
installed."
  (or (require feature nil t)
      (let ((package-directory-list '("/usr/share/emacs/site-lisp/elpa"))
            (package-user-dir (make-temp-file "fastrevert-bench-no-packages-" t)))
        (unwind-protect
            (progn (package-initialize)
                   (require feature nil t))
          (delete-directory package-user-dir t)))))

(defun fastrevert-bench-size (key &optional table)
  "Return the workload size KEY for this run (default or quick).
TABLE is a section's list of (KEY DEFAULT QUICK), by default the
harness's own."
  (let ((entry (assq key (or table fastrevert-bench--sizes))))
    (unless entry
      (error "Unknown benchmark size %S" key))
    (if (fastrevert-bench-quick-p) (nth 2 entry) (nth 1 entry))))

;;;; Registries

(defvar fastrevert-bench-implementations nil
  "Alist of (IMPL . AVAILABLE-P) for every registered implementation.")

(defvar fastrevert-bench-sections nil
  "Functions printing the headline sections of `make bench'.
Each is called with the run's temporary directory, in which it may
create files, after the idle-tick table.  The headline is what a
first `make bench' shows within a few minutes: the burst, the
checkout at the smallest size and the workload table.  Register a
section with `add-hook' and a depth to place it (the burst is at 10,
the checkout at 20, the workload table at 30); a section that takes
long belongs on `fastrevert-bench-full-sections' instead.")

(defvar fastrevert-bench-full-sections nil
  "Functions printing the further sections of `make bench-full'.
Like `fastrevert-bench-sections', and run after the headline sections
and the stock anchors (the elp table, 50 MiB of output, many small
processes): the scale, memory and process-detail sections.")

(defvar fastrevert-bench--columns nil
  "Alist of (CASE . COLUMNS); COLUMNS is a list of plists in order.")

(defun fastrevert-bench-define-implementation (impl available-p)
  "Register implementation IMPL, available when AVAILABLE-P is non-nil.
AVAILABLE-P is a function of no arguments."
  (setf (alist-get impl fastrevert-bench-implementations) available-p)
  impl)

(defun fastrevert-bench-define (case column &rest props)
  "Register COLUMN of benchmark CASE, replacing any earlier definition.
PROPS is a plist with :impl (an implementation registered with
`fastrevert-bench-define-implementation'), :header (the column
title) and :function (the measuring function; see the Commentary
of this file for the arguments each CASE passes).  Return COLUMN."
  (let* ((entry (list :column column
                      :impl (or (plist-get props :impl) 'stock)
                      :header (or (plist-get props :header)
                                  (symbol-name column))
                      :function (plist-get props :function)))
         (columns (alist-get case fastrevert-bench--columns))
         (index (cl-position column columns
                             :key (lambda (c) (plist-get c :column)))))
    (unless (functionp (plist-get entry :function))
      (error "Benchmark column %S of %S has no :function" column case))
    (if index
        (setf (nth index columns) entry)
      (setq columns (append columns (list entry))))
    (setf (alist-get case fastrevert-bench--columns) columns)
    column))

(defun fastrevert-bench-implementation-available-p (impl)
  "Return non-nil if implementation IMPL can run in this Emacs."
  (let ((pred (alist-get impl fastrevert-bench-implementations)))
    (and pred (funcall pred))))

(defun fastrevert-bench-columns (case)
  "Return the column plists of CASE whose implementation is available."
  (cl-remove-if-not
   (lambda (column)
     (fastrevert-bench-implementation-available-p (plist-get column :impl)))
   (alist-get case fastrevert-bench--columns)))

(defun fastrevert-bench--call (column &rest args)
  "Call the measuring function of COLUMN with ARGS."
  (apply (plist-get column :function) args))

;;;; Output helpers

(defun fastrevert-bench--out (format-string &rest args)
  "Print FORMAT-STRING formatted with ARGS to standard output."
  (princ (apply #'format format-string args)))

(defun fastrevert-bench--progress (format-string &rest args)
  "Report progress, FORMAT-STRING with ARGS, on standard error."
  (apply #'message (concat "fastrevert-bench: " format-string) args))

(defun fastrevert-bench--loud (format-string &rest args)
  "Report a wrong result, FORMAT-STRING with ARGS, on both streams.
A wrong result must not be missed in a long table, so it goes to
standard output between the tables and to standard error too."
  (let ((text (apply #'format format-string args)))
    (princ (format "\n!!! %s !!!\n\n" text))
    (message "fastrevert-bench: !!! %s" text)))

(defun fastrevert-bench--numeric-p (cell)
  "Return non-nil if table CELL is a number or the empty mark \"-\"."
  (string-match-p "\\`\\(-\\|[-+]?[0-9.]+\\(e[-+]?[0-9]+\\)?\\)\\'" cell))

(defun fastrevert-bench--print-table (header rows)
  "Print a Markdown table with HEADER (strings) and ROWS (lists of strings).
Columns whose cells are all numbers are right-aligned, the others
left-aligned, and widths fit the widest cell, so that the table
reads well in a terminal as well as rendered."
  (let* ((all (cons header rows))
         (widths (apply #'cl-mapcar
                        (lambda (&rest cells)
                          (apply #'max 3 (mapcar #'string-width cells)))
                        all))
         (right (apply #'cl-mapcar
                       (lambda (&rest cells)
                         (and cells
                              (cl-every #'fastrevert-bench--numeric-p cells)))
                       (or rows (list (make-list (length header) "")))))
         (line (lambda (cells)
                 (concat
                  "| "
                  (mapconcat
                   #'identity
                   (cl-mapcar
                    (lambda (cell width right)
                      (let ((fill (make-string (- width (string-width cell))
                                               ?\s)))
                        (if right (concat fill cell) (concat cell fill))))
                    cells widths right)
                   " | ")
                  " |\n"))))
    (princ (funcall line header))
    (princ (concat "|"
                   (mapconcat
                    (lambda (pair)
                      (let ((dashes (make-string (1+ (car pair)) ?-)))
                        (if (cdr pair) (concat dashes ":") (concat ":" dashes))))
                    (cl-mapcar #'cons widths right)
                    "|")
                   "|\n"))
    (dolist (row rows)
      (princ (funcall line row)))
    (princ "\n")))

(defun fastrevert-bench--column-headers (columns titles)
  "Return one header per column of COLUMNS and title of TITLES.
Each reads \"COLUMN-HEADER TITLE\", columns outermost."
  (cl-loop for column in columns
           for name = (plist-get column :header)
           append (mapcar (lambda (title) (concat name " " title)) titles)))

(defun fastrevert-bench--heading (title)
  "Print TITLE as a Markdown section heading."
  (fastrevert-bench--out "\n## %s\n\n" title))

(defun fastrevert-bench--fmt (format-string value)
  "Format VALUE with FORMAT-STRING, or return \"-\" when VALUE is nil."
  (if value (format format-string value) "-"))

(defun fastrevert-bench--mean (numbers)
  "Return the arithmetic mean of NUMBERS, or nil when there are none."
  (and numbers (/ (float (apply #'+ numbers)) (length numbers))))

(defun fastrevert-bench-median (numbers)
  "Return the median of the non-empty list NUMBERS."
  (let* ((sorted (sort (copy-sequence numbers) #'<))
         (n (length sorted)))
    (if (cl-oddp n)
        (nth (/ n 2) sorted)
      (/ (+ (nth (1- (/ n 2)) sorted) (nth (/ n 2) sorted)) 2.0))))

;;;; Processes

(defun fastrevert-bench-wait-for-exit (proc)
  "Wait until PROC has exited and Emacs has read all of its output.
This waits on the process itself, never for a fixed time: it
accepts output until the process is dead and no more output comes.
It signals an error after `fastrevert-bench-process-timeout'
seconds, killing PROC, so a hung benchmark cannot hang `make bench'."
  (let ((deadline (+ (float-time) fastrevert-bench-process-timeout)))
    ;; `accept-process-output' returns non-nil while output arrives;
    ;; once the process is dead and its pipe is drained it returns nil
    ;; at once, and `process-live-p' is then nil as well.
    (while (or (accept-process-output proc 1.0)
               (process-live-p proc))
      (when (> (float-time) deadline)
        (delete-process proc)
        (error "Benchmark process %s did not finish in %s s"
               (process-name proc) fastrevert-bench-process-timeout)))))

(defun fastrevert-bench-measure-into-buffer (repeats expected-size fill)
  "Time FILL filling a fresh buffer, REPEATS times.
FILL is called with the buffer (also current) and must return
once all data are in it.  Each run gets a new buffer with undo
disabled, a garbage collection beforehand so that runs start
alike, and its own `benchmark-run' triple; the buffer is killed
afterwards.  When the buffer does not end up with EXPECTED-SIZE
characters that is recorded.  Return a plist with :triples (one
per run) and :bad (the wrong sizes seen)."
  (let (triples bad)
    (dotimes (_ repeats)
      (let ((buffer (generate-new-buffer " *fastrevert-bench-output*")))
        (unwind-protect
            (with-current-buffer buffer
              (buffer-disable-undo)
              (garbage-collect)
              (push (benchmark-run 1 (funcall fill buffer)) triples)
              (unless (= (buffer-size) expected-size)
                (push (buffer-size) bad)))
          (kill-buffer buffer))))
    (list :triples (nreverse triples) :bad (nreverse bad))))

;;;; Stock auto-revert

(defun fastrevert-bench--set-custom (symbol value)
  "Set user option SYMBOL to VALUE through its custom setter.
`auto-revert-use-notify' needs this: its setter removes existing
file watches when notification is turned off."
  (funcall (or (get symbol 'custom-set) #'set-default) symbol value))

(defun fastrevert-bench--watched-count (buffers)
  "Return how many of BUFFERS have an auto-revert file watch."
  (cl-count-if (lambda (buffer)
                 (buffer-local-value 'auto-revert-notify-watch-descriptor
                                     buffer))
               buffers))

(defun fastrevert-bench-time-ticks (ticks tick)
  "Call TICK TICKS times and time each call and the whole series.
Garbage is collected first so that every column starts from the
same heap state.  A tick is incomplete when it leaves buffers in
`auto-revert-remaining-buffers' (it saw pending input and stopped
early); such a tick would make the time too low, so it is
counted.  Return a plist with :times, :triple and :incomplete."
  (let ((times nil)
        (incomplete 0))
    (garbage-collect)
    (let ((triple
           (benchmark-run 1
             (dotimes (_ ticks)
               (let ((start (float-time)))
                 (funcall tick)
                 (push (- (float-time) start) times))
               (when auto-revert-remaining-buffers
                 (setq incomplete (1+ incomplete)))))))
      (list :times (nreverse times) :triple triple :incomplete incomplete))))

(defun fastrevert-bench--with-stock-auto-revert (use-notify avoid-polling
                                                            buffers thunk)
  "Call THUNK with stock `global-auto-revert-mode' on for BUFFERS.
USE-NOTIFY and AVOID-POLLING become `auto-revert-use-notify' and
`auto-revert-avoid-polling'.  Two ticks run before THUNK: the
first adds the file watches (in notify mode), and since a new
watch marks its buffer as modified, the second clears that mark,
so THUNK sees the steady state.  Everything is restored
afterwards, which also removes the watches.  Return what THUNK
returns, with :watched added to it."
  (let ((old-notify auto-revert-use-notify)
        (old-avoid auto-revert-avoid-polling))
    (unwind-protect
        (progn
          (fastrevert-bench--set-custom 'auto-revert-use-notify use-notify)
          (fastrevert-bench--set-custom 'auto-revert-avoid-polling
                                        avoid-polling)
          (global-auto-revert-mode 1)
          (auto-revert-buffers)
          (auto-revert-buffers)
          (let ((watched (fastrevert-bench--watched-count buffers)))
            (append (list :watched watched) (funcall thunk))))
      (global-auto-revert-mode -1)
      (fastrevert-bench--set-custom 'auto-revert-use-notify old-notify)
      (fastrevert-bench--set-custom 'auto-revert-avoid-polling old-avoid))))

(defun fastrevert-bench--stock-tick (use-notify avoid-polling)
  "Return a `tick' function for stock auto-revert.
USE-NOTIFY and AVOID-POLLING are the settings it runs with."
  (lambda (buffers ticks)
    (fastrevert-bench--with-stock-auto-revert
     use-notify avoid-polling buffers
     (lambda () (fastrevert-bench-time-ticks ticks #'auto-revert-buffers)))))

(defconst fastrevert-bench--elp-functions
  '(auto-revert-buffers
    auto-revert--buffer-candidates
    auto-revert--polled-buffers
    auto-revert-buffer
    auto-revert-active-p
    auto-revert-handler
    buffer-stale--default-function
    file-remote-p
    file-readable-p
    verify-visited-file-modtime)
  "Functions instrumented for the stock elp table.
These are the steps one polling tick takes for each buffer, down
to the primitives that touch the file system.")

(defun fastrevert-bench--elp-report (functions thunk)
  "Instrument FUNCTIONS with elp, call THUNK and return the elp report.
The report is the text of `elp-results', which in batch mode also
prints to standard output; that copy is captured instead, so the
caller decides where the table goes."
  (elp-restore-all)
  (elp-reset-all)
  (unwind-protect
      (progn
        (mapc #'elp-instrument-function functions)
        (funcall thunk)
        (let ((elp-reset-after-results t)
              (elp-sort-by-function #'elp-sort-by-total-time))
          (save-window-excursion
            (save-current-buffer
              (prog1 (with-output-to-string (elp-results))
                (when (get-buffer elp-results-buffer)
                  (kill-buffer elp-results-buffer)))))))
    (elp-restore-all)))

(defun fastrevert-bench--stock-tick-elp (buffers ticks)
  "Return the elp report of TICKS stock polling ticks over BUFFERS."
  (fastrevert-bench--with-stock-auto-revert
   nil nil buffers
   (lambda ()
     (list :report
           (fastrevert-bench--elp-report
            fastrevert-bench--elp-functions
            (lambda () (dotimes (_ ticks) (auto-revert-buffers))))))))

;;;; Stock process output

(defconst fastrevert-bench-output-rows
  '((make-process-4096
     . "make-process cat -> buffer, read-process-output-max 4096")
    (make-process-65536
     . "make-process cat -> buffer, read-process-output-max 65536")
    (call-process . "call-process cat -> buffer")
    (insert-file-contents . "insert-file-contents"))
  "Rows of the process output table: (ROW . LABEL).
`insert-file-contents' is the baseline of the ratio column.")

(defun fastrevert-bench--cat-into (buffer file rpom)
  "Run `cat FILE' with `make-process' into BUFFER and wait for it.
RPOM is bound as `read-process-output-max' while the output is
read, which is when Emacs consults it.  The default filter inserts
the output; the sentinel is `ignore' so that no \"Process
finished\" line is added to the data."
  (let* ((read-process-output-max rpom)
         (coding-system-for-read fastrevert-bench-coding)
         (coding-system-for-write fastrevert-bench-coding)
         (proc (make-process :name "fastrevert-bench-cat"
                             :buffer buffer
                             :command (list "cat" file)
                             :connection-type 'pipe
                             :noquery t
                             :sentinel #'ignore)))
    (fastrevert-bench-wait-for-exit proc)))

(defun fastrevert-bench--stock-output (row file runs)
  "Measure stock method ROW reading FILE into fresh buffers.
RUNS is the number of repetitions."
  (let ((size (file-attribute-size (file-attributes file))))
    (fastrevert-bench-measure-into-buffer
     runs size
     (pcase row
       ('make-process-4096
        (lambda (buffer) (fastrevert-bench--cat-into buffer file 4096)))
       ('make-process-65536
        (lambda (buffer) (fastrevert-bench--cat-into buffer file 65536)))
       ('call-process
        (lambda (_buffer)
          (let* ((coding-system-for-read fastrevert-bench-coding)
                 (status (call-process "cat" nil t nil file)))
            (unless (eql status 0)
              (error "The cat process exited with %S" status)))))
       ('insert-file-contents
        (lambda (_buffer)
          (let ((coding-system-for-read fastrevert-bench-coding))
            (insert-file-contents file))))
       (_ (error "Unknown output row %S" row))))))

;;;; Stock process spawning

(defconst fastrevert-bench-spawn-rows
  '((make-process . "make-process + accept-process-output")
    (call-process . "call-process"))
  "Rows of the spawn table: (ROW . LABEL).")

(defun fastrevert-bench-time-spawns (count run)
  "Call RUN COUNT times, each with an emptied buffer current, and time them.
RUN must return once the run's output is in the buffer.  Every run
writes into the same buffer, so that an empty buffer after a run
shows a lost output.  Return a plist with :triple (the
`benchmark-run' triple of the series) and :bad (runs that left the
buffer empty)."
  (let ((buffer (generate-new-buffer " *fastrevert-bench-spawn*"))
        (bad 0))
    (unwind-protect
        (with-current-buffer buffer
          (buffer-disable-undo)
          (garbage-collect)
          (let ((triple
                 (benchmark-run 1
                   (dotimes (_ count)
                     (erase-buffer)
                     (funcall run)
                     (when (zerop (buffer-size))
                       (setq bad (1+ bad)))))))
            (list :triple triple :bad bad)))
      (kill-buffer buffer))))

(defun fastrevert-bench--stock-spawn (row count)
  "Run `ls /' COUNT times with the stock method ROW."
  (fastrevert-bench-time-spawns
   count
   (pcase row
     ('make-process
      (lambda ()
        (fastrevert-bench-wait-for-exit
         (make-process :name "fastrevert-bench-ls"
                       :buffer (current-buffer)
                       :command '("ls" "/")
                       :connection-type 'pipe
                       :noquery t
                       :sentinel #'ignore))))
     ('call-process
      (lambda () (call-process "ls" nil t nil "/")))
     (_ (error "Unknown spawn row %S" row)))))

;;;; Registrations

(fastrevert-bench-define-implementation 'stock #'always)
(fastrevert-bench-define-implementation
 'fastrevert (lambda () (featurep 'fastrevert)))

(fastrevert-bench-define 'tick 'stock-poll
  :impl 'stock :header "stock poll"
  :function (fastrevert-bench--stock-tick nil nil))
(fastrevert-bench-define 'tick 'stock-notify
  :impl 'stock :header "stock notify"
  :function (fastrevert-bench--stock-tick t nil))
(fastrevert-bench-define 'tick 'stock-notify-avoid-polling
  :impl 'stock :header "stock notify+avoid-polling"
  :function (fastrevert-bench--stock-tick t t))
(fastrevert-bench-define 'tick-elp 'stock-poll
  :impl 'stock :header "stock poll"
  :function #'fastrevert-bench--stock-tick-elp)
(fastrevert-bench-define 'output 'stock
  :impl 'stock :header "stock"
  :function #'fastrevert-bench--stock-output)
(fastrevert-bench-define 'spawn 'stock
  :impl 'stock :header "stock"
  :function #'fastrevert-bench--stock-spawn)

;; The fastrevert columns will be registered here, with :impl
;; 'fastrevert, by the auto-revert and process-output work.

;;;; Running the tick benchmarks

(defun fastrevert-bench--make-files (dir count)
  "Create COUNT small text files in DIR and return their names."
  (make-directory dir t)
  (let ((coding-system-for-write 'utf-8-unix)
        files)
    (dotimes (i count)
      (let ((file (expand-file-name (format "file-%05d.txt" i) dir)))
        (write-region (format "This is benchmark file %d.\n" i) nil file
                      nil 'silent)
        (push file files)))
    (nreverse files)))

(defun fastrevert-bench--visit (files)
  "Visit FILES without selecting them and return their buffers.
Version control is off while visiting: the files are in a temporary
directory, and with `auto-revert-check-vc-info' nil an idle tick
never consults it, so it would only slow down the setup.  FILES are
new files with one name each, so the buffer visiting one, if any, is
the one `get-file-buffer' finds; the stock `find-buffer-visiting' would
also walk every buffer comparing truenames, which makes visiting
10,000 files take minutes of setup that no benchmark measures."
  (cl-letf (((symbol-function 'find-buffer-visiting)
             (lambda (file &optional _predicate) (get-file-buffer file))))
    (let ((vc-handled-backends nil))
      (mapcar #'find-file-noselect files))))

(defun fastrevert-bench--kill-buffers (buffers)
  "Kill BUFFERS without asking anything."
  (let ((kill-buffer-query-functions nil))
    (dolist (buffer buffers)
      (when (buffer-live-p buffer)
        (kill-buffer buffer)))))

(defun fastrevert-bench--run-ticks (root &optional counts)
  "Measure every `tick' column for each file count, under ROOT.
COUNTS are the file counts, by default the `:file-counts' size.
Return an alist of (COUNT . ((COLUMN-PLIST . RESULT) ...)) and nil,
as (TICK-RESULTS . nil); the elp table is `fastrevert-bench--print-elp'."
  (let ((ticks (fastrevert-bench-size :ticks))
        results)
    (dolist (count (or counts (fastrevert-bench-size :file-counts)))
      (let* ((dir (expand-file-name (format "files-%d" count) root))
             (start (float-time))
             (buffers (fastrevert-bench--visit
                       (fastrevert-bench--make-files dir count))))
        (fastrevert-bench--progress "visited %d files in %.1f s"
                                    count (- (float-time) start))
        (unwind-protect
            (push (cons count
                        (mapcar (lambda (column)
                                  (fastrevert-bench--progress
                                   "tick: %d files, %s"
                                   count (plist-get column :header))
                                  (cons column
                                        (fastrevert-bench--call
                                         column buffers ticks)))
                                (fastrevert-bench-columns 'tick)))
                  results)
          (fastrevert-bench--kill-buffers buffers)
          (delete-directory dir t))))
    (cons (nreverse results) nil)))

(defun fastrevert-bench--print-ticks (results elp-results)
  "Print the tick tables from RESULTS and the ELP-RESULTS reports."
  (let ((ticks (fastrevert-bench-size :ticks))
        (columns (fastrevert-bench-columns 'tick)))
    (fastrevert-bench--heading
     "Auto-revert: main-thread ms per idle polling tick")
    (fastrevert-bench--out
     "`auto-revert-buffers' called directly, %d ticks per cell after 2 \
warm-up ticks, nothing
changed on disk, all files in one directory.  Cells are the mean ms per tick.
- stock poll: `auto-revert-use-notify' nil; every tick stats every buffer.
- stock notify: `auto-revert-use-notify' t (default); the tick still visits
  every buffer but skips the stat of buffers whose watch reported nothing.
- stock notify+avoid-polling: also `auto-revert-avoid-polling' t; buffers with
  a watch are not even visited (and are then never polled again).\n\n"
     ticks)
    (fastrevert-bench--print-table
     (cons "files" (mapcar (lambda (c) (concat (plist-get c :header)
                                               " ms/tick"))
                           columns))
     (mapcar (lambda (row)
               (cons (number-to-string (car row))
                     (mapcar (lambda (cell)
                               (let ((times (plist-get (cdr cell) :times)))
                                 (fastrevert-bench--fmt
                                  "%.3f" (and times
                                              (* 1000 (fastrevert-bench--mean
                                                       times))))))
                             (cdr row))))
             results))
    (fastrevert-bench--out
     "Details: per-tick spread, us per visited buffer, the `benchmark-run' \
triple over all
ticks of the cell (elapsed s, GCs, GC s) and how many buffers had a file \
watch.\n\n")
    (fastrevert-bench--print-table
     '("files" "column" "ticks" "mean ms" "min ms" "max ms" "us/buffer"
       "elapsed s" "GCs" "GC s" "watched")
     (cl-loop
      for (count . cells) in results
      append
      (cl-loop
       for (column . result) in cells
       for times = (plist-get result :times)
       for triple = (plist-get result :triple)
       for mean = (fastrevert-bench--mean times)
       do (when (and result (> (or (plist-get result :incomplete) 0) 0))
            (fastrevert-bench--loud
             "%s, %d files: %d ticks stopped early (input pending)"
             (plist-get column :header) count
             (plist-get result :incomplete)))
       collect
       (list (number-to-string count)
             (plist-get column :header)
             (fastrevert-bench--fmt "%d" (length times))
             (fastrevert-bench--fmt "%.3f" (and mean (* 1000 mean)))
             (fastrevert-bench--fmt "%.3f" (and times
                                                (* 1000 (apply #'min times))))
             (fastrevert-bench--fmt "%.3f" (and times
                                                (* 1000 (apply #'max times))))
             (fastrevert-bench--fmt "%.1f" (and mean (/ (* 1e6 mean) count)))
             (fastrevert-bench--fmt "%.4f" (nth 0 triple))
             (fastrevert-bench--fmt "%d" (nth 1 triple))
             (fastrevert-bench--fmt "%.4f" (nth 2 triple))
             (fastrevert-bench--fmt "%d" (plist-get result :watched))))))
    (dolist (entry elp-results)
      (pcase-let ((`(,column ,count ,result) entry))
        (fastrevert-bench--heading
         (format "elp: %s, %d files, %d idle ticks"
                 (plist-get column :header) count ticks))
        (fastrevert-bench--out
         "Elapsed and average times are seconds and include elp's own \
overhead.\n\n")
        (princ (or (plist-get result :report) "-\n"))))))

;;;; Running the process benchmarks

(defun fastrevert-bench--make-data-file (file size)
  "Write SIZE bytes of printable ASCII lines to FILE.
A 1 MiB block of pseudo-random lines (a fixed seed, so every run
reads the same bytes) is written repeatedly; the last line is cut
to make the size exact and ends in a newline."
  (let* ((block-size (min size 1048576))
         (block (progn
                  ;; Seeding makes the pseudo-random text reproducible.
                  (random "fastrevert-bench")
                  (with-temp-buffer
                    (while (< (buffer-size) block-size)
                      (dotimes (_ (+ 20 (random 100)))
                        (insert (+ 32 (random 95))))
                      (insert "\n"))
                    (concat (buffer-substring-no-properties
                             1 block-size)
                            "\n"))))
         (coding-system-for-write 'no-conversion)
         (written 0))
    (write-region "" nil file nil 'silent)
    (while (< written size)
      (let ((chunk (if (<= (+ written block-size) size)
                       block
                     (concat (substring block 0 (- size written 1)) "\n"))))
        (write-region chunk nil file t 'silent)
        (setq written (+ written (length chunk)))))
    (random t)
    file))

(defun fastrevert-bench--run-output (root)
  "Measure every `output' column on a data file under ROOT.
Return a list of (ROW . ((COLUMN . RESULT) ...))."
  (let* ((size (fastrevert-bench-size :output-bytes))
         (runs (fastrevert-bench-size :output-runs))
         (file (expand-file-name "output.txt" root)))
    (fastrevert-bench--make-data-file file size)
    (unwind-protect
        (mapcar
         (lambda (row)
           (cons (car row)
                 (mapcar (lambda (column)
                           (fastrevert-bench--progress
                            "output: %s, %s" (car row)
                            (plist-get column :header))
                           (cons column
                                 (fastrevert-bench--call
                                  column (car row) file runs)))
                         (fastrevert-bench-columns 'output))))
         fastrevert-bench-output-rows)
      (delete-file file))))

(defun fastrevert-bench--output-means (result)
  "Return (ELAPSED GCS GC-TIME MIN-ELAPSED) averaged over RESULT."
  (let ((triples (plist-get result :triples)))
    (and triples
         (list (fastrevert-bench--mean (mapcar #'car triples))
               (fastrevert-bench--mean (mapcar #'cadr triples))
               (fastrevert-bench--mean (mapcar #'caddr triples))
               (apply #'min (mapcar #'car triples))))))

(defun fastrevert-bench--print-output (results)
  "Print the process output table from RESULTS."
  (let* ((size (fastrevert-bench-size :output-bytes))
         (runs (fastrevert-bench-size :output-runs))
         (columns (fastrevert-bench-columns 'output))
         (baseline
          (cl-loop for (column . result)
                   in (alist-get 'insert-file-contents results)
                   when (eq (plist-get column :impl) 'stock)
                   return (car (fastrevert-bench--output-means result)))))
    (fastrevert-bench--heading
     (format "Process output: %.0f MiB of text into a buffer"
             (/ size 1048576.0)))
    (fastrevert-bench--out
     "%d bytes of ASCII lines, %d run(s) per cell, each into a fresh \
buffer with undo
off; cells are means per run of `benchmark-run' triples.  \
coding-system-for-read
is bound to `%s' for every method.  make-process uses a pipe, the default
filter and a wait on `accept-process-output' until exit.  ratio = elapsed / \
stock
insert-file-contents elapsed.\n\n"
     size runs fastrevert-bench-coding)
    (dolist (row results)
      (dolist (cell (cdr row))
        (when (plist-get (cdr cell) :bad)
          (fastrevert-bench--loud
           "SIZE MISMATCH: %s, %s: expected %d chars, got %S"
           (car row) (plist-get (car cell) :header) size
           (plist-get (cdr cell) :bad)))))
    (fastrevert-bench--print-table
     (cons "method" (fastrevert-bench--column-headers
                     columns '("elapsed s" "min s" "GCs" "GC s" "ratio")))
     (mapcar
      (lambda (row)
        (cons (alist-get (car row) fastrevert-bench-output-rows)
              (cl-loop
               for column in columns
               for result = (cdr (assq column (cdr row)))
               for means = (fastrevert-bench--output-means result)
               append
               (list (fastrevert-bench--fmt "%.3f" (nth 0 means))
                     (fastrevert-bench--fmt "%.3f" (nth 3 means))
                     (fastrevert-bench--fmt "%.1f" (nth 1 means))
                     (fastrevert-bench--fmt "%.3f" (nth 2 means))
                     (fastrevert-bench--fmt
                      "%.2f" (and means baseline (> baseline 0)
                                  (/ (nth 0 means) baseline)))))))
      results))))

(defun fastrevert-bench--run-spawn ()
  "Measure every `spawn' column; return (ROW . ((COLUMN . RESULT) ...))."
  (let ((count (fastrevert-bench-size :spawn-count)))
    (mapcar
     (lambda (row)
       (cons (car row)
             (mapcar (lambda (column)
                       (fastrevert-bench--progress
                        "spawn: %s x %d, %s" (car row) count
                        (plist-get column :header))
                       (cons column
                             (fastrevert-bench--call column (car row) count)))
                     (fastrevert-bench-columns 'spawn))))
     fastrevert-bench-spawn-rows)))

(defun fastrevert-bench--print-spawn (results)
  "Print the spawn table from RESULTS."
  (let ((count (fastrevert-bench-size :spawn-count))
        (columns (fastrevert-bench-columns 'spawn)))
    (fastrevert-bench--heading
     (format "Process spawn: `ls /' %d times" count))
    (fastrevert-bench--out
     "Each run waits for exit and all output; one `benchmark-run' triple over \
all runs.\n\n")
    (dolist (row results)
      (dolist (cell (cdr row))
        (when (and (cdr cell) (> (plist-get (cdr cell) :bad) 0))
          (fastrevert-bench--loud "%s, %s: %d runs produced no output"
                                  (car row) (plist-get (car cell) :header)
                                  (plist-get (cdr cell) :bad)))))
    (fastrevert-bench--print-table
     (cons "method" (fastrevert-bench--column-headers
                     columns '("elapsed s" "GCs" "GC s" "ms/process")))
     (mapcar
      (lambda (row)
        (cons (alist-get (car row) fastrevert-bench-spawn-rows)
              (cl-loop
               for column in columns
               for triple = (plist-get (cdr (assq column (cdr row))) :triple)
               append
               (list (fastrevert-bench--fmt "%.3f" (nth 0 triple))
                     (fastrevert-bench--fmt "%d" (nth 1 triple))
                     (fastrevert-bench--fmt "%.3f" (nth 2 triple))
                     (fastrevert-bench--fmt
                      "%.2f" (and triple (/ (* 1000 (nth 0 triple))
                                            count)))))))
      results))))

;;;; Entry point

(defvar fastrevert-bench-vc--sizes)
(defvar fastrevert-bench-vc--trace)
(defvar fastrevert-bench-vc-results)
(declare-function fastrevert-bench-vc--run "fastrevert-bench-vc" (root))
(declare-function fastrevert-bench-vc--run-checkout "fastrevert-bench-vc" (root))

(defconst fastrevert-bench--headline-checkout-deadline 10
  "Seconds the headline's checkout gives a stock row to catch up.
The full run gives them the version-control bench's own deadline.")

(defun fastrevert-bench--vc-headline (root)
  "Run the checkout at the smallest size only, under ROOT.
This is the headline's part of the version-control bench
\(fastrevert-bench-vc.el), whose stock rows, which never catch up
by notification, get `fastrevert-bench--headline-checkout-deadline'
seconds; the full run has the whole bench."
  (let* ((sizes fastrevert-bench-vc--sizes)
         (counts (cdr (assq :checkout-counts sizes)))
         (deadline (cdr (assq :stock-deadline sizes)))
         (fastrevert-bench-vc--sizes
          (append (list (list :checkout-counts
                              (list (car (nth 0 counts))) (list (car (nth 1 counts))))
                        (list :stock-deadline
                              (min (nth 0 deadline) fastrevert-bench--headline-checkout-deadline)
                              (nth 1 deadline)))
                  sizes))
         (fastrevert-bench-vc--trace (make-temp-file "fastrevert-bench-trace-" t)))
    (unwind-protect
        (fastrevert-bench-vc--run-checkout root)
      (delete-directory fastrevert-bench-vc--trace t))))

(defun fastrevert-bench--place-vc-sections ()
  "Give the version-control bench a headline part and its whole in the full run.
fastrevert-bench-vc.el puts all of it on `fastrevert-bench-sections':
the checkouts at every size, the rebase, the burst curve and the plot,
which take several minutes.  The headline keeps the checkout at the
smallest size; `fastrevert-bench-vc--run' moves to the full run."
  (when (memq #'fastrevert-bench-vc--run fastrevert-bench-sections)
    (remove-hook 'fastrevert-bench-sections #'fastrevert-bench-vc--run)
    (add-hook 'fastrevert-bench-sections #'fastrevert-bench--vc-headline 20)
    (add-hook 'fastrevert-bench-full-sections #'fastrevert-bench-vc--run 95)))

(defun fastrevert-bench--load-fastrevert ()
  "Try to load fastrevert; return a string describing the outcome.
A missing or broken fastrevert must not stop the stock benchmarks,
so both a missing library and an error while loading it (say, a
module built for another Emacs) only leave its columns out."
  (condition-case err
      (if (require 'fastrevert nil t)
          (progn
            ;; The fastrevert columns and sections live beside this file.
            (require 'fastrevert-bench-revert)
            (require 'fastrevert-bench-process)
            (require 'fastrevert-bench-vc)
            (require 'fastrevert-bench-vcinfo)
            (require 'fastrevert-bench-memory)
            (require 'fastrevert-bench-workload)
            (require 'fastrevert-bench-remote)
            (require 'fastrevert-bench-lsp)
            (fastrevert-bench--place-vc-sections)
            (format "loaded from %s" (or (locate-library "fastrevert") "?")))
        "not found; stock columns only")
    (error (format "failed to load (%s); stock columns only"
                   (error-message-string err)))))

(defun fastrevert-bench--interpreted-p (function)
  "Return non-nil if FUNCTION is an interpreted (not compiled) function."
  (memq (car-safe function) '(closure lambda)))

(defun fastrevert-bench--compile-self ()
  "Byte-compile this file's functions if it was loaded as source.
`make bench' loads the .el file, and interpreted wait and timing
loops would add their own overhead to the numbers.  Compiling them
in memory makes the result independent of how the file was loaded.
Column functions that are closures made while this file was being
loaded are compiled too."
  (let (symbols)
    (mapatoms
     (lambda (symbol)
       (when (and (fboundp symbol)
                  (string-prefix-p "fastrevert-bench-" (symbol-name symbol))
                  (fastrevert-bench--interpreted-p (symbol-function symbol)))
         (push symbol symbols))))
    (mapc #'byte-compile symbols))
  (dolist (entry fastrevert-bench--columns)
    (dolist (column (cdr entry))
      (let ((function (plist-get column :function)))
        (when (fastrevert-bench--interpreted-p function)
          (plist-put column :function (byte-compile function)))))))

(defun fastrevert-bench--first-line (program &rest args)
  "Return the first output line of PROGRAM run with ARGS, or \"?\"."
  (or (ignore-errors (car (apply #'process-lines program args))) "?"))

(defun fastrevert-bench--cpu-model ()
  "Return the CPU model name from /proc/cpuinfo, or \"?\"."
  (or (ignore-errors
        (with-temp-buffer
          (insert-file-contents "/proc/cpuinfo")
          (and (re-search-forward "^model name[ \t]*: *\\(.*\\)$" nil t)
               (match-string 1))))
      "?"))

(defun fastrevert-bench--print-header (fastrevert-status)
  "Print the machine and run description, with FASTREVERT-STATUS."
  (fastrevert-bench--out "# fastrevert benchmarks\n\n")
  (fastrevert-bench--out "- date: %s\n"
                         (format-time-string "%Y-%m-%d %H:%M:%S %Z"))
  (fastrevert-bench--out "- machine: %s\n"
                         (fastrevert-bench--first-line "uname" "-srm"))
  (fastrevert-bench--out "- cpu: %s, nproc %d\n"
                         (fastrevert-bench--cpu-model) (num-processors))
  (fastrevert-bench--out "- emacs: %s (%s)\n" emacs-version
                         system-configuration)
  (fastrevert-bench--out "- gc-cons-threshold %d, read-process-output-max \
%d, file-notify %s\n"
                         gc-cons-threshold read-process-output-max
                         (if (boundp 'file-notify--library)
                             file-notify--library
                           "?"))
  (fastrevert-bench--out "- mode: %s\n"
                         (if (fastrevert-bench-quick-p)
                             "QUICK (FASTREVERT_BENCH_QUICK): smoke sizes, \
not for comparison"
                           "default"))
  (fastrevert-bench--out "- fastrevert: %s\n" fastrevert-status))

(defun fastrevert-bench--run-section (function root)
  "Run the section FUNCTION with ROOT and report on stderr how long it took.
Return nil, so that `run-hook-wrapped' goes on to the next section."
  (let ((start (float-time)))
    (funcall function root)
    (fastrevert-bench--progress "section %s: %.0f s" function (- (float-time) start))
    nil))

(defun fastrevert-bench--print-elp (root)
  "Print the elp table of stock polling ticks, measured under ROOT."
  (let* ((count (fastrevert-bench-size :elp-files))
         (ticks (fastrevert-bench-size :ticks))
         (dir (expand-file-name "elp-files" root))
         (buffers (fastrevert-bench--visit (fastrevert-bench--make-files dir count))))
    (unwind-protect
        (dolist (column (fastrevert-bench-columns 'tick-elp))
          (fastrevert-bench--progress "elp: %d files, %s" count (plist-get column :header))
          (let ((result (fastrevert-bench--call column buffers ticks)))
            (fastrevert-bench--heading
             (format "elp: %s, %d files, %d idle ticks" (plist-get column :header) count ticks))
            (fastrevert-bench--out
             "Elapsed and average times are seconds and include elp's own overhead.\n\n")
            (princ (or (plist-get result :report) "-\n"))))
      (fastrevert-bench--kill-buffers buffers)
      (delete-directory dir t))))

(defun fastrevert-bench--run-parts (full)
  "Run the headline benchmarks, and the rest too when FULL is non-nil.
Print their tables to standard output.  Everything the run creates
lives in one temporary directory that is deleted at the end."
  (let ((start (float-time))
        (status (fastrevert-bench--load-fastrevert))
        (root (make-temp-file "fastrevert-bench-" t)))
    (fastrevert-bench--compile-self)
    ;; Stock columns need stock auto-revert, and an auto-revert timer
    ;; firing inside a process wait would distort the process numbers.
    (when global-auto-revert-mode
      (global-auto-revert-mode -1))
    ;; Likewise, loading fastrevert must not leave it on: its columns
    ;; turn it on for themselves, and the stock columns run without it.
    (when (and (boundp 'fastrevert-mode) (symbol-value 'fastrevert-mode)
               (fboundp 'fastrevert-mode))
      (funcall #'fastrevert-mode -1))
    (unwind-protect
        (progn
          (fastrevert-bench--print-header status)
          (let ((ticks (fastrevert-bench--run-ticks root)))
            (fastrevert-bench--print-ticks (car ticks) nil))
          (run-hook-wrapped 'fastrevert-bench-sections #'fastrevert-bench--run-section root)
          (if (not full)
              (fastrevert-bench--out
               "\nThe headline ends here.  `make bench-full' adds the elp table, the stock
anchors (50 MiB of output, many small processes), auto-revert under three kinds of
change, the checkout at the larger size, the rebase, the burst curve up to 10,000
files, the memory table and the process details (about %s more).\n"
               "half an hour")
            (fastrevert-bench--print-elp root)
            (fastrevert-bench--print-output (fastrevert-bench--run-output root))
            (fastrevert-bench--print-spawn (fastrevert-bench--run-spawn))
            (run-hook-wrapped 'fastrevert-bench-full-sections #'fastrevert-bench--run-section
                              root)))
      (delete-directory root t))
    (fastrevert-bench--out "\nTotal benchmark time: %.1f s\n"
                           (- (float-time) start))))

(defun fastrevert-bench-run ()
  "Run the headline benchmarks and print their tables to standard output.
This is the entry point of `make bench': the idle tick, the burst,
the checkout at the smallest size and the workload table, in a few
minutes.  `fastrevert-bench-run-full' adds the rest."
  (fastrevert-bench--run-parts nil))

(defun fastrevert-bench-run-full ()
  "Run every benchmark and print the tables to standard output.
This is the entry point of `make bench-full': the headline of
`fastrevert-bench-run', then the scale, memory and detail sections."
  (fastrevert-bench--run-parts t))

(provide 'fastrevert-bench)

;;; fastrevert-bench.el ends here
