;;; fastrevert-bench-workload.el --- The process half on editors' work  -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; Keywords: processes, tools

;;; Commentary:

;; The workload table of `make bench': the commands that Magit, VC,
;; xref, compile, grep and LSP clients run, each measured with stock
;; Emacs and with fastrevert in the same run, alternating, and shown
;; as stock / fastrevert (above 1 means fastrevert is faster).
;;
;; The bench makes its own Git repository with `git fast-import':
;; 20,000 commits, 2,000 C-like files in 20 directories (about 16 MB,
;; with 2.2 MB of `grep -rn' matches), tags and branches, and a few
;; changed and untracked files for `git status' to report.  All of it
;; is made from a fixed seed, so every run reads the same bytes.
;;
;; - Synchronous rows: each command into a buffer, by stock
;;   `call-process' and by `fastrevert-call-process' (for
;;   `process-lines' and `shell-command-to-string', the same function
;;   with `call-process' bound to the drop-in).  The limit is what the
;;   command costs with its output sent to the null device, plus
;;   `insert-file-contents' of its output: no reader of a pipe can do
;;   much better.
;; - Asynchronous rows: output into a buffer and to a filter, by stock
;;   `make-process' and by `fastrevert-make-process' with and without
;;   `:framing', among them an LSP-shaped stream of framed JSON
;;   messages from 1 KB to 4 MB, and short outputs at three values of
;;   `read-process-output-max'.
;;
;; Each row runs stock and fastrevert interleaved: 15 rounds or more,
;; each of one or more calls of each, stock's and fastrevert's taking
;; turns call by call, the first of each pair alternating, so that the
;; machine's drift and a busy neighbour touch both alike.  A round lasts
;; some 20 ms at least, so that a command of a millisecond is measured
;; over a dozen calls.  The tables show each side's median round and
;; its best, and the ratio of stock's to fastrevert's for each.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'fastrevert-bench)

(declare-function fastrevert-call-process "fastrevert-call"
                  (program &optional infile destination display &rest args))
(declare-function fastrevert-make-process "fastrevert-process" (&rest args))
(declare-function fastrevert-accept-process-output "fastrevert-process"
                  (&optional process seconds millisec just-this-one))
(declare-function fastrevert-delete-process "fastrevert-process" (process))
(declare-function fastrevert-process-live-p "fastrevert-process" (process))
(declare-function fastrevert-bench-process--available-p "fastrevert-bench-process" ())
(defvar fastrevert-bench-coding)
(defvar fastrevert-bench-process-timeout)

(defconst fastrevert-bench-workload--sizes
  '((:commits 20000 2000)
    (:directories 20 4)
    (:files-per-directory 100 50)
    (:seconds-per-row 2.5 0.5)
    (:max-rounds 60 20)
    (:min-rounds 15 3)
    (:round-seconds 0.02 0.01))
  "Workload sizes as (KEY DEFAULT QUICK).
A row runs for about `:seconds-per-row', in `:min-rounds' to
`:max-rounds' rounds of at least `:round-seconds' each.")

(defun fastrevert-bench-workload--size (key)
  "Return the size KEY of this section for this run."
  (fastrevert-bench-size key fastrevert-bench-workload--sizes))

;;;; The repository

(defconst fastrevert-bench-workload--words
  ["alpha" "beta" "gamma" "delta" "value" "count" "index" "buffer" "length" "result"
   "status" "error" "node" "list" "table" "entry" "offset" "limit" "cursor" "state"]
  "Words the generated files and messages are made of.")

(defun fastrevert-bench-workload--word ()
  "Return a word chosen at random."
  (aref fastrevert-bench-workload--words
        (random (length fastrevert-bench-workload--words))))

(defun fastrevert-bench-workload--source-line (index)
  "Return line INDEX of a generated C-like file, without its newline.
About one line in eight holds the text `return 1' that the grep rows
search for."
  (if (< (random 100) 12)
      (format "    if (%s_%d > %s) return 1; /* %s %s */"
              (fastrevert-bench-workload--word) index (fastrevert-bench-workload--word)
              (fastrevert-bench-workload--word) (fastrevert-bench-workload--word))
    (format "    %s_%d = %s(%s, %d);"
            (fastrevert-bench-workload--word) index (fastrevert-bench-workload--word)
            (fastrevert-bench-workload--word) (random 1000))))

(defun fastrevert-bench-workload--insert-data (text)
  "Insert a fast-import data command for the ASCII TEXT."
  (insert (format "data %d\n" (length text)) text "\n"))

(defun fastrevert-bench-workload--insert-commit (mark time message)
  "Insert the header of commit MARK at TIME with MESSAGE, on `main'."
  (insert (format "commit refs/heads/main\nmark :%d\n" mark)
          (format "author bench <bench@example.org> %d +0000\n" time)
          (format "committer bench <bench@example.org> %d +0000\n" time))
  (fastrevert-bench-workload--insert-data message))

(defun fastrevert-bench-workload--stream (commits directories per-directory)
  "Insert a `git fast-import' stream into the current buffer.
The first commit adds DIRECTORIES times PER-DIRECTORY source files of
120 lines; then COMMITS minus 300 commits each change a small note
file; the last 300 each rewrite five lines of one source file.  Tags
and branches point along the history."
  (let ((files (make-vector (* directories per-directory) nil))
        (time 1600000000)
        (mark 0)
        (tail (min 300 (/ commits 2))))
    (random "fastrevert-bench-workload")
    (dotimes (i (length files))
      (aset files i (let ((lines (make-vector 120 nil)))
                      (dotimes (j 120)
                        (aset lines j (fastrevert-bench-workload--source-line j)))
                      lines)))
    (let ((path (lambda (i) (format "src/dir%02d/file%03d.c" (/ i per-directory)
                                    (% i per-directory))))
          (text (lambda (lines) (concat (mapconcat #'identity lines "\n") "\n"))))
      (fastrevert-bench-workload--insert-commit (cl-incf mark) time "Import the sources")
      (dotimes (i (length files))
        (insert (format "M 100644 inline %s\n" (funcall path i)))
        (fastrevert-bench-workload--insert-data (funcall text (aref files i))))
      (insert "\n")
      (dotimes (i (- commits tail 1))
        (let ((note (% i 500)))
          (fastrevert-bench-workload--insert-commit
           (cl-incf mark) (cl-incf time 60)
           (format "Record the %s of %s in note %d, change %d"
                   (fastrevert-bench-workload--word) (fastrevert-bench-workload--word)
                   note i))
          ;; Twenty notes to a directory: each commit then writes two
          ;; small trees, not one of 500 entries.
          (insert (format "M 100644 inline notes/d%02d/n%03d.txt\n" (% note 25) note))
          (fastrevert-bench-workload--insert-data
           (format "note %d, change %d: %s %s %s\n" note i (fastrevert-bench-workload--word)
                   (fastrevert-bench-workload--word) (fastrevert-bench-workload--word)))
          (insert "\n")
          (when (zerop (% i 40))
            (insert (format "reset refs/tags/v%d.%d\nfrom :%d\n\n" (/ i 4000) (% i 4000) mark)))
          (when (zerop (% i 400))
            (insert (format "reset refs/heads/topic-%d\nfrom :%d\n\n" i mark)))))
      (dotimes (i tail)
        (let* ((index (% (* i 7) (length files)))
               (lines (aref files index)))
          (dotimes (_ 5)
            (let ((line (random 120)))
              (aset lines line (fastrevert-bench-workload--source-line line))))
          (fastrevert-bench-workload--insert-commit
           (cl-incf mark) (cl-incf time 60)
           (format "Rework %s in %s" (fastrevert-bench-workload--word) (funcall path index)))
          (insert (format "M 100644 inline %s\n" (funcall path index)))
          (fastrevert-bench-workload--insert-data (funcall text lines))
          (insert "\n"))))
    (random t)))

(defun fastrevert-bench-workload--git-environment (home)
  "Return `process-environment' for Git in these rows, with HOME as home."
  (append (list (concat "HOME=" home) "GIT_CONFIG_NOSYSTEM=1" "GIT_TERMINAL_PROMPT=0"
                "GIT_AUTHOR_NAME=bench" "GIT_AUTHOR_EMAIL=bench@example.org"
                "GIT_COMMITTER_NAME=bench" "GIT_COMMITTER_EMAIL=bench@example.org"
                "LC_ALL=C.UTF-8")
          process-environment))

(defun fastrevert-bench-workload--run (dir program &rest args)
  "Run PROGRAM with ARGS in DIR, discarding output; signal if it fails."
  (let ((default-directory (file-name-as-directory dir)))
    (with-temp-buffer
      (unless (eql 0 (apply #'call-process program nil t nil args))
        (error "Command %s %s failed: %s" program (string-join args " ") (buffer-string))))))

(defun fastrevert-bench-workload--make-repository (dir)
  "Make the benchmark repository in DIR, which must not exist yet."
  (let ((commits (fastrevert-bench-workload--size :commits))
        (stream (make-temp-file "fastrevert-bench-stream-"))
        (start (float-time)))
    (make-directory dir t)
    (unwind-protect
        (progn
          (with-temp-buffer
            (set-buffer-multibyte nil)
            (fastrevert-bench-workload--stream
             commits (fastrevert-bench-workload--size :directories)
             (fastrevert-bench-workload--size :files-per-directory))
            (let ((coding-system-for-write 'no-conversion))
              (write-region nil nil stream nil 'silent)))
          (fastrevert-bench-workload--run dir "git" "init" "-q" "-b" "main")
          (let ((default-directory (file-name-as-directory dir)))
            (with-temp-buffer
              (unless (eql 0 (call-process "git" stream t nil "fast-import" "--quiet"))
                (error "Git fast-import failed: %s" (buffer-string)))))
          (fastrevert-bench-workload--run dir "git" "reset" "-q" "--hard" "main")
          ;; A few changed and untracked files for `git status' to list.
          (dotimes (i 8)
            (let ((file (expand-file-name (format "src/dir00/file%03d.c" i) dir)))
              (with-temp-buffer
                (insert-file-contents file)
                (goto-char (point-max))
                (insert "    /* a change in the work tree */\n")
                (write-region nil nil file nil 'silent))))
          (dotimes (i 4)
            (write-region "untracked\n" nil (expand-file-name (format "scratch-%d.txt" i) dir)
                          nil 'silent))
          (fastrevert-bench-workload--run dir "git" "status" "--porcelain"))
      (delete-file stream))
    (fastrevert-bench--progress "workload: repository of %d commits made in %.1f s"
                                commits (- (float-time) start))))

;;;; Paired measurement

(defconst fastrevert-bench-workload--schedstat
  (format "/proc/self/task/%d/schedstat" (emacs-pid))
  "Linux's account of the main thread's time on a processor, in nanoseconds.")

(defun fastrevert-bench-workload--main-thread-seconds ()
  "Return the processor time Emacs's main thread has used, in seconds.
The main thread's own schedstat where Linux keeps one, else the
whole process's time, which counts the engine's thread too."
  (if (file-readable-p fastrevert-bench-workload--schedstat)
      (with-temp-buffer
        (insert-file-contents fastrevert-bench-workload--schedstat)
        (/ (string-to-number (buffer-substring (point-min) (progn (skip-chars-forward "0-9")
                                                                   (point))))
           1e9))
    (float-time (get-internal-run-time))))

(defvar fastrevert-bench-workload--finished-at nil
  "When the process of the call being timed ended, as its sentinel saw it.
A wait in the event loop learns of the end only at its next turn; the
call's time is up to the end, which is when a user sees it.")

(defun fastrevert-bench-workload--time (thunk)
  "Return the seconds THUNK takes."
  (let ((start (float-time)))
    (funcall thunk)
    (- (float-time) start)))

(defun fastrevert-bench-workload--measure (thunk)
  "Call THUNK; return (SIZE SECONDS MAIN).
SIZE is what THUNK returned, SECONDS the time it took up to its
process's end (see `fastrevert-bench-workload--finished-at'), MAIN the
main thread's processor time meanwhile."
  (let ((start (float-time))
        (main (fastrevert-bench-workload--main-thread-seconds))
        (fastrevert-bench-workload--finished-at nil))
    (let ((size (funcall thunk)))
      (list size
            (- (or fastrevert-bench-workload--finished-at (float-time)) start)
            (- (fastrevert-bench-workload--main-thread-seconds) main)))))

(defun fastrevert-bench-workload--rounds (round-seconds)
  "Return the number of rounds for a row whose rounds take ROUND-SECONDS."
  (max (fastrevert-bench-workload--size :min-rounds)
       (min (fastrevert-bench-workload--size :max-rounds)
            (floor (/ (fastrevert-bench-workload--size :seconds-per-row)
                      (max round-seconds 1e-4))))))

(defun fastrevert-bench-workload--pair (label stock native &optional extra allow-empty)
  "Time the thunks STOCK and NATIVE against each other for the row LABEL.
Each is called with no arguments and returns the size of what it
produced, which must be the same for both, and not 0 or nil unless
ALLOW-EMPTY.  A round calls each the same number of times, taking
turns call by call, the first of each pair alternating from one pair
to the next and from one round to the next.  EXTRA, when given, is a
list of further thunks timed as often each round (the limit's parts).
Return a plist: :stock and :native (each round's mean seconds a
call), :stock-cpu and :native-cpu (each round's mean seconds of the
main thread's processor time a call), :ratios (stock over fastrevert,
per round), :calls (calls of each a round), :extra (a list of lists of
mean seconds, one per thunk of EXTRA) and :bad (calls whose sizes
differed)."
  (fastrevert-bench--progress "workload: %s" label)
  (let ((stock-times nil) (native-times nil) (ratios nil) (bad 0)
        (stock-cpu nil) (native-cpu nil)
        (extra-times (mapcar #'ignore extra))
        calls rounds)
    ;; A first pair, not counted, warms caches and sets the numbers of
    ;; calls and rounds.
    (let* ((warm (+ (fastrevert-bench-workload--time stock)
                    (fastrevert-bench-workload--time native)))
           (per-call (max (/ warm 2) 1e-5)))
      (setq calls (max 1 (ceiling (/ (fastrevert-bench-workload--size :round-seconds)
                                      per-call))))
      (setq rounds (fastrevert-bench-workload--rounds (* 2 calls per-call))))
    (dotimes (round rounds)
      (let ((stock-seconds 0.0) (native-seconds 0.0)
            (stock-main 0.0) (native-main 0.0))
        (dotimes (call calls)
          ;; The first of each pair alternates.
          (let* ((stock-first (cl-evenp (+ round call)))
                 (first (fastrevert-bench-workload--measure (if stock-first stock native)))
                 (second (fastrevert-bench-workload--measure (if stock-first native stock)))
                 (stock-run (if stock-first first second))
                 (native-run (if stock-first second first)))
            (setq stock-seconds (+ stock-seconds (nth 1 stock-run))
                  stock-main (+ stock-main (nth 2 stock-run))
                  native-seconds (+ native-seconds (nth 1 native-run))
                  native-main (+ native-main (nth 2 native-run)))
            (unless (and (equal (car stock-run) (car native-run))
                         (or allow-empty (not (member (car stock-run) '(0 nil)))))
              (setq bad (1+ bad)))))
        (push (/ stock-seconds calls) stock-times)
        (push (/ native-seconds calls) native-times)
        (push (/ stock-main calls) stock-cpu)
        (push (/ native-main calls) native-cpu)
        (push (/ stock-seconds (max native-seconds 1e-9)) ratios)
        (setq extra-times
              (cl-mapcar (lambda (thunk times)
                           (let ((seconds 0.0))
                             (dotimes (_ calls)
                               (setq seconds (+ seconds (fastrevert-bench-workload--time thunk))))
                             (cons (/ seconds calls) times)))
                         extra extra-times))))
    (when (> bad 0)
      (fastrevert-bench--loud
       "%s: %d calls where stock and fastrevert made different output, or none"
       label bad))
    (list :stock stock-times :native native-times :ratios ratios :calls calls
          :stock-cpu stock-cpu :native-cpu native-cpu :extra extra-times :bad bad)))

(defun fastrevert-bench-workload--summary (result)
  "Return the cells of RESULT, a value of `fastrevert-bench-workload--pair'.
They are the rounds (as ROUNDS x CALLS), stock's median ms a call,
fastrevert's, the ratio of the two, stock's best round's ms a call,
fastrevert's, and the ratio of those."
  (let* ((stock (plist-get result :stock))
         (native (plist-get result :native))
         (stock-median (fastrevert-bench-median stock))
         (native-median (fastrevert-bench-median native))
         (stock-best (apply #'min stock))
         (native-best (apply #'min native)))
    (list (format "%d x %d" (length stock) (plist-get result :calls))
          (fastrevert-bench-workload--ms stock-median)
          (fastrevert-bench-workload--ms native-median)
          (format "%.2f" (/ stock-median native-median))
          (fastrevert-bench-workload--ms stock-best)
          (fastrevert-bench-workload--ms native-best)
          (format "%.2f" (/ stock-best native-best)))))

(defun fastrevert-bench-workload--into-buffer (function)
  "Return a thunk to call FUNCTION in an emptied scratch buffer.
FUNCTION is called with no arguments while the buffer is current; the
thunk returns the buffer's size afterwards."
  (let ((buffer (get-buffer-create " *fastrevert-bench-workload*")))
    (with-current-buffer buffer (buffer-disable-undo))
    (lambda ()
      (with-current-buffer buffer
        (erase-buffer)
        (funcall function)
        (buffer-size)))))

;;;; Synchronous rows

(defun fastrevert-bench-workload--sync-rows ()
  "Return the synchronous rows as (LABEL KIND PROGRAM ARGS...).
KIND is `call' (into the current buffer by the `call-process' being
measured), `lines' (`process-lines') or `shell'
\(`shell-command-to-string', PROGRAM being the command line)."
  (let ((format "--format=%H %an %s"))
    `(("true" call "true")
      ("git status --porcelain" call "git" "status" "--porcelain")
      ("git log -200 --format=..." call "git" "log" "-200" ,format)
      ("git log --format=... (all commits)" call "git" "log" ,format)
      ("git diff HEAD~300" call "git" "diff" "HEAD~300")
      ("git rev-parse HEAD" call "git" "rev-parse" "HEAD")
      ("git for-each-ref" call "git" "for-each-ref"
       "--format=%(refname) %(objectname) %(upstream:short) %(subject)")
      ("grep -rn 'return 1' src" call "grep" "-rn" "return 1" "src")
      ("git grep -n 'return 1'" call "git" "--no-pager" "grep" "-n" "return 1")
      ("process-lines git ls-files" lines "git" "ls-files")
      ("shell-command-to-string git branch" shell "git branch --list"))))

(defun fastrevert-bench-workload--sync-thunk (row caller)
  "Return a thunk running a synchronous ROW with CALLER.
ROW is one of `fastrevert-bench-workload--sync-rows'.
CALLER is `call-process' or its drop-in.  The thunk returns the size
of what the command produced."
  (pcase-let ((`(,_label ,kind ,program . ,args) row)
              ;; The function itself: `call-process' bound to its own
              ;; name would be a cycle.
              (caller (indirect-function caller)))
    (pcase kind
      ('call
       (fastrevert-bench-workload--into-buffer
        (lambda ()
          (let ((coding-system-for-read fastrevert-bench-coding))
            (unless (eql 0 (apply caller program nil t nil args))
              (error "%s failed" program))))))
      ('lines
       (lambda ()
         (let ((coding-system-for-read fastrevert-bench-coding))
           (cl-letf (((symbol-function 'call-process) caller))
             (apply #'+ (mapcar #'length (apply #'process-lines program args)))))))
      ('shell
       (lambda ()
         (let ((coding-system-for-read fastrevert-bench-coding))
           (cl-letf (((symbol-function 'call-process) caller))
             (length (shell-command-to-string program)))))))))

(defun fastrevert-bench-workload--limit-thunks (row root)
  "Return the limit's two thunks for ROW, saving its output under ROOT.
The first runs the command with its output written to a file (not
to the null device: GNU grep stops at the first match when its
output is the null device, which would make it look three times
faster than it is); the second inserts the command's output, saved
once, with `insert-file-contents'.  Nil for rows that are not a
plain command."
  (pcase-let ((`(,label ,kind ,program . ,args) row))
    (when (eq kind 'call)
      (let ((file (expand-file-name (format "output-%d" (sxhash-equal label)) root))
            (scratch (expand-file-name (format "written-%d" (sxhash-equal label)) root))
            (coding-system-for-read 'no-conversion))
        (with-temp-buffer
          (set-buffer-multibyte nil)
          (apply #'call-process program nil t nil args)
          (let ((coding-system-for-write 'no-conversion))
            (write-region nil nil file nil 'silent)))
        (list (lambda () (apply #'call-process program nil (list :file scratch) nil args))
              (fastrevert-bench-workload--into-buffer
               (lambda ()
                 (let ((coding-system-for-read fastrevert-bench-coding))
                   (insert-file-contents file)))))))))

(defun fastrevert-bench-workload--output-bytes (row)
  "Return the number of bytes of ROW's output, measured once."
  (funcall (fastrevert-bench-workload--sync-thunk row #'call-process)))

(defun fastrevert-bench-workload--readable-size (bytes)
  "Return a readable size for BYTES."
  (cond ((< bytes 1024) (format "%d B" bytes))
        ((< bytes (* 1024 1024)) (format "%.0f KB" (/ bytes 1000.0)))
        (t (format "%.1f MB" (/ bytes 1e6)))))

(defun fastrevert-bench-workload--ms (seconds)
  "Format SECONDS as milliseconds for a table cell."
  (let ((ms (* 1000 seconds)))
    (format (if (< ms 10) "%.2f" "%.1f") ms)))

(defun fastrevert-bench-workload--run-sync (repository root)
  "Measure the synchronous rows in REPOSITORY, with scratch files under ROOT.
Return the table rows, as lists of strings."
  (let ((default-directory (file-name-as-directory repository))
        (rows nil))
    (dolist (row (fastrevert-bench-workload--sync-rows))
      (let* ((bytes (fastrevert-bench-workload--output-bytes row))
             (limit (fastrevert-bench-workload--limit-thunks row root))
             (result (fastrevert-bench-workload--pair
                      (car row)
                      (fastrevert-bench-workload--sync-thunk row #'call-process)
                      (fastrevert-bench-workload--sync-thunk row #'fastrevert-call-process)
                      limit (zerop bytes)))
             (native (fastrevert-bench-median (plist-get result :native)))
             (limit-seconds (and limit (apply #'+ (mapcar #'fastrevert-bench-median
                                                          (plist-get result :extra))))))
        (push (append (list (car row) (fastrevert-bench-workload--readable-size bytes))
                      (fastrevert-bench-workload--summary result)
                      (list (if limit-seconds (fastrevert-bench-workload--ms limit-seconds) "-")
                            (if limit-seconds (format "%.2f" (/ native limit-seconds)) "-")))
              rows)))
    (nreverse rows)))

;;;; Asynchronous rows

(defun fastrevert-bench-workload--make-lsp-stream (file)
  "Write to FILE an LSP-shaped stream of framed JSON messages; return their count.
1,000 messages of about 1 KB, 100 of 10 KB, 20 of 100 KB, 4 of 1 MB and
one of 4 MB, in an order fixed by a seed, each a Content-Length header
and a JSON body of that size, as a language server sends diagnostics,
completions and whole-file results."
  (let ((sizes nil))
    (dolist (spec '((1000 . 1000) (100 . 10000) (20 . 100000) (4 . 1000000) (1 . 4000000)))
      (dotimes (_ (car spec)) (push (cdr spec) sizes)))
    (random "fastrevert-bench-lsp")
    (let ((vector (vconcat sizes)))
      ;; A seeded shuffle, so that big messages come between small ones.
      (cl-loop for i from (1- (length vector)) downto 1
               do (cl-rotatef (aref vector i) (aref vector (random (1+ i)))))
      (setq sizes (append vector nil)))
    (random t)
    (let ((coding-system-for-write 'no-conversion)
          (id 0))
      (with-temp-file file
        (set-buffer-multibyte nil)
        (dolist (size sizes)
          (let* ((head (format "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{\"items\":\"" (cl-incf id)))
                 (body (concat head (make-string (max 0 (- size (length head) 3)) ?x) "\"}}")))
            (insert (format "Content-Length: %d\r\n\r\n" (length body)) body)))))
    (length sizes)))

(defun fastrevert-bench-workload--lsp-splitter (on-message)
  "Return a filter that splits a raw stream into LSP messages, as clients do.
The filter gathers output in a buffer of its own, as jsonrpc.el does,
and calls ON-MESSAGE with each complete body."
  (let ((pending (generate-new-buffer " *fastrevert-bench-lsp*" t)))
    (with-current-buffer pending (set-buffer-multibyte nil))
    (lambda (_process text)
      (with-current-buffer pending
        (goto-char (point-max))
        (insert text)
        (let ((done nil))
          (while (not done)
            (goto-char (point-min))
            (if (not (looking-at "Content-Length: \\([0-9]+\\)\r\n\r\n"))
                (setq done t)
              (let* ((length (string-to-number (match-string 1)))
                     (start (match-end 0))
                     (end (+ start length)))
                (if (> end (point-max))
                    (setq done t)
                  (funcall on-message (buffer-substring-no-properties start end))
                  (delete-region (point-min) end))))))))))

(defun fastrevert-bench-workload--split-messages (text on-message)
  "Call ON-MESSAGE with each body of the complete LSP messages in TEXT."
  (let ((start 0))
    (while (string-match "Content-Length: \\([0-9]+\\)\r\n\r\n" text start)
      (let* ((body (match-end 0))
             (end (+ body (string-to-number (match-string 1 text)))))
        (funcall on-message (substring text body end))
        (setq start end)))))

(defun fastrevert-bench-workload--line-splitter (on-line)
  "Return a filter to split a raw stream into lines and call ON-LINE on each."
  (let ((partial ""))
    (lambda (_process text)
      (let ((lines (split-string (concat partial text) "\n")))
        (setq partial (car (last lines)))
        (dolist (line (butlast lines))
          (funcall on-line line))))))

(defun fastrevert-bench-workload--process (impl wait command &rest args)
  "Run COMMAND with IMPL until its sentinel has run, waiting the WAIT way.
IMPL is `stock' (`make-process') or `fastrevert' (`fastrevert-make-process').
ARGS are further keywords: :buffer or :filter, and :framing, which
stock leaves out.  WAIT is `process', a wait on the process itself
\(`accept-process-output' on it, or `fastrevert-accept-process-output'),
as a client that waits for its reply does; or `loop',
`accept-process-output' on nil, as the command loop waits while
`grep' and `compile' stream into their buffers."
  (let* ((done nil)
         (deadline (+ (float-time) fastrevert-bench-process-timeout))
         (sentinel (lambda (_process _event)
                     (setq done t
                           fastrevert-bench-workload--finished-at (float-time))))
         (coding-system-for-read fastrevert-bench-coding)
         (coding-system-for-write fastrevert-bench-coding)
         (process (if (eq impl 'stock)
                      (apply #'make-process :name "fastrevert-bench-stock" :command command
                             :noquery t :connection-type 'pipe :sentinel sentinel
                             (cl-loop for (key value) on args by #'cddr
                                      unless (eq key :framing) append (list key value)))
                    (apply #'fastrevert-make-process :name "fastrevert-bench" :command command
                           :noquery t :coding fastrevert-bench-coding :sentinel sentinel args))))
    (while (not done)
      (cond ((eq wait 'loop) (accept-process-output nil 0.05))
            ((eq impl 'stock) (accept-process-output process 1.0))
            (t (fastrevert-accept-process-output process 1.0)))
      (when (> (float-time) deadline)
        (if (eq impl 'stock) (delete-process process) (fastrevert-delete-process process))
        (error "Benchmark process did not finish in %s s" fastrevert-bench-process-timeout)))))

(defun fastrevert-bench-workload--stream-rows (grep lsp-file)
  "Return the streaming rows as (LABEL MAKER), MAKER taking IMPL and WAIT.
GREP is the grep command line, LSP-FILE the LSP-shaped stream.  A
maker returns a thunk that runs its process to the end and returns
what it received (a size or a count), the same for both when nothing
was lost."
  (let ((count-bytes (lambda ()
                       (let ((received 0))
                         (cons (lambda (_process text) (setq received (+ received (length text))))
                               (lambda () received))))))
    (list
     (list "grep -rn into a buffer (M-x grep)"
           (lambda (impl wait)
             (fastrevert-bench-workload--into-buffer
              (lambda ()
                (fastrevert-bench-workload--process impl wait grep :buffer (current-buffer))))))
     (list "grep -rn to a filter"
           (lambda (impl wait)
             (lambda ()
               (let ((counter (funcall count-bytes)))
                 (fastrevert-bench-workload--process impl wait grep :filter (car counter))
                 (funcall (cdr counter))))))
     (list "grep -rn by lines (filter splits; :framing lines)"
           (lambda (impl wait)
             (lambda ()
               (let ((lines 0))
                 (if (eq impl 'stock)
                     (fastrevert-bench-workload--process
                      impl wait grep
                      :filter (fastrevert-bench-workload--line-splitter
                               (lambda (_line) (setq lines (1+ lines)))))
                   ;; Each batch holds whole lines, which the filter still
                   ;; splits, as stock's does.
                   (fastrevert-bench-workload--process
                    impl wait grep :framing 'lines
                    :filter (lambda (_process text)
                              (dolist (_line (butlast (split-string text "\n")))
                                (setq lines (1+ lines))))))
                 lines))))
     (list "LSP stream, 1,125 messages of 1 KB to 4 MB (:framing lsp)"
           (lambda (impl wait)
             (lambda ()
               (let ((messages 0))
                 (if (eq impl 'stock)
                     (fastrevert-bench-workload--process
                      impl wait (list "cat" lsp-file)
                      :filter (fastrevert-bench-workload--lsp-splitter
                               (lambda (_body) (setq messages (1+ messages)))))
                   (fastrevert-bench-workload--process
                    impl wait (list "cat" lsp-file) :framing 'lsp
                    :filter (lambda (_process text)
                              (fastrevert-bench-workload--split-messages
                               text (lambda (_body) (setq messages (1+ messages)))))))
                 messages)))))))

(defconst fastrevert-bench-workload--waits
  '((process . "waiting on the process") (loop . "in the event loop"))
  "How the asynchronous rows wait, and how their labels say it.")

(defun fastrevert-bench-workload--async-rows (repository root)
  "Return the asynchronous rows as (LABEL STOCK FASTREVERT) thunks.
Each thunk runs its process to the end and returns what it received
\(a size or a count), the same for both when nothing was lost.
REPOSITORY is the benchmark's repository, ROOT a scratch directory."
  (let* ((default-directory (file-name-as-directory repository))
         (grep (list "grep" "-rn" "return 1" "src"))
         (lsp-file (expand-file-name "lsp-stream" root))
         (small (expand-file-name "out-100" root))
         (medium (expand-file-name "out-51200" root))
         (rows nil))
    (fastrevert-bench-workload--make-lsp-stream lsp-file)
    (fastrevert-bench--make-data-file small 100)
    (fastrevert-bench--make-data-file medium 51200)
    (pcase-dolist (`(,wait . ,how) fastrevert-bench-workload--waits)
      (pcase-dolist (`(,label ,maker) (fastrevert-bench-workload--stream-rows grep lsp-file))
        (push (list (format "%s, %s" label how)
                    (funcall maker 'stock wait) (funcall maker 'fastrevert wait))
              rows)))
    (dolist (file (list small medium))
      (dolist (rpom '(4096 40960 409600))
        (let ((command (list "cat" file)))
          (push (list (format "%s B into a buffer, read-process-output-max %d"
                              (file-attribute-size (file-attributes file)) rpom)
                      (fastrevert-bench-workload--into-buffer
                       (lambda ()
                         (let ((read-process-output-max rpom))
                           (fastrevert-bench-workload--process
                            'stock 'process command :buffer (current-buffer)))))
                      (fastrevert-bench-workload--into-buffer
                       (lambda ()
                         (let ((read-process-output-max rpom))
                           (fastrevert-bench-workload--process
                            'fastrevert 'process command :buffer (current-buffer))))))
                rows))))
    (push (list "ls / spawned and waited for"
                (fastrevert-bench-workload--into-buffer
                 (lambda () (fastrevert-bench-workload--process
                             'stock 'process '("ls" "/") :buffer (current-buffer))))
                (fastrevert-bench-workload--into-buffer
                 (lambda () (fastrevert-bench-workload--process
                             'fastrevert 'process '("ls" "/") :buffer (current-buffer)))))
          rows)
    (nreverse rows)))

(defun fastrevert-bench-workload--run-async (repository root)
  "Measure the asynchronous rows in REPOSITORY, with scratch files under ROOT.
Return the table rows, as lists of strings."
  (let ((default-directory (file-name-as-directory repository)))
    (fastrevert-bench-workload--measure-async repository root)))

(defun fastrevert-bench-workload--measure-async (repository root)
  "Measure the asynchronous rows for REPOSITORY, with scratch files under ROOT.
The rows are those of `fastrevert-bench-workload--async-rows'; each
has the timing columns and then the main thread's processor time."
  (mapcar (lambda (row)
            (let ((result (fastrevert-bench-workload--pair (car row) (nth 1 row) (nth 2 row))))
              (cons (car row)
                    (append (fastrevert-bench-workload--summary result)
                            (fastrevert-bench-workload--cpu-summary result)))))
          (fastrevert-bench-workload--async-rows repository root)))

(defun fastrevert-bench-workload--cpu-summary (result)
  "Return the columns of the main thread's time of RESULT, a pair's measurement.
They are stock's and fastrevert's median round's processor time of
Emacs's main thread, in ms a call, and fastrevert's over stock's."
  (let ((stock (fastrevert-bench-median (plist-get result :stock-cpu)))
        (native (fastrevert-bench-median (plist-get result :native-cpu))))
    (list (fastrevert-bench-workload--ms stock)
          (fastrevert-bench-workload--ms native)
          (format "%.2f" (/ native (max stock 1e-9))))))


;;;; Plot

(defun fastrevert-bench-workload--plot (rows)
  "Plot ROWS, (LABEL RATIO) each, as bars of stock / fastrevert, with gnuplot.
The PNG goes where the environment variable FASTREVERT_BENCH_PROCESS_PLOT
says; nothing is plotted when it is unset or empty, or gnuplot is missing."
  (let ((output (getenv "FASTREVERT_BENCH_PROCESS_PLOT")))
    (cond
     ((or (null output) (string-empty-p output)) nil)
     ((not (executable-find "gnuplot"))
      (fastrevert-bench--loud "gnuplot is not installed; no process plot"))
     (t
      (let ((data (make-temp-file "fastrevert-bench-process-plot-" nil ".dat")))
        (unwind-protect
            (progn
              (with-temp-file data
                (dolist (row rows)
                  (insert (format "%S %s\n" (truncate-string-to-width (car row) 34 nil nil "...")
                                  (cadr row)))))
              (with-temp-buffer
                (insert (format "set terminal pngcairo size 1100,700 font ',9' noenhanced
set output %S
set title 'stock / fastrevert per workload, Emacs %s (above 1: fastrevert is faster)'
set ylabel 'stock time / fastrevert time'
set style data histograms
set style fill solid 0.6
set boxwidth 0.8
set xtics rotate by -40 left
set yrange [0:*]
set grid ytics
set key off
set bmargin 12
set arrow from graph 0, first 1 to graph 1, first 1 nohead dashtype 2
plot %S using 2:xtic(1)\n" (expand-file-name output) emacs-version data))
                (unless (zerop (call-process-region (point-min) (point-max) "gnuplot"
                                                    nil '(t t) nil))
                  (fastrevert-bench--loud "gnuplot failed: %s" (buffer-string))))
              (fastrevert-bench--out "Process plot: %s\n\n" output))
          (delete-file data)))))))

;;;; Entry point

(defun fastrevert-bench-workload-run (root)
  "Run the workload tables under ROOT, print them and plot their ratios."
  (when (and (featurep 'fastrevert)
             (require 'fastrevert-bench-process nil t)
             (fastrevert-bench-process--available-p))
    (let ((repository (expand-file-name "workload-repo" root))
          (home (expand-file-name "workload-home" root))
          sync async)
      (make-directory home t)
      (unwind-protect
          (let ((process-environment (fastrevert-bench-workload--git-environment home)))
            (fastrevert-bench-workload--make-repository repository)
            (setq sync (fastrevert-bench-workload--run-sync repository root))
            (fastrevert-bench-workload--print-sync sync)
            (setq async (fastrevert-bench-workload--run-async repository root))
            (fastrevert-bench-workload--print-async async)
            (fastrevert-bench-workload--plot
             (append (mapcar (lambda (row) (list (car row) (nth 5 row))) sync)
                     (mapcar (lambda (row) (list (car row) (nth 4 row))) async))))
        (delete-directory repository t)
        (delete-directory home t)))))

(defconst fastrevert-bench-workload--timing-columns
  '("rounds x calls" "stock ms" "fastrevert ms" "stock/fastrevert"
    "best stock ms" "best fastrevert ms" "best stock/fastrevert")
  "The columns of `fastrevert-bench-workload--summary'.")

(defconst fastrevert-bench-workload--timing-text
  "Stock and fastrevert interleaved: in each round both make the same number of calls,
taking turns call by call.  \"stock ms\", \"fastrevert ms\" and \"stock/fastrevert\" are the
median round's ms a call and the ratio of the two; the \"best\" columns are the best
round's.  Above 1, fastrevert is faster."
  "What the timing columns of the workload tables mean.")

(defun fastrevert-bench-workload--print-sync (rows)
  "Print the synchronous table from ROWS."
  (fastrevert-bench--heading "Workload: synchronous commands, as Magit, VC and xref run them")
  (fastrevert-bench--out
   "Each command's output into a buffer (undo off), `coding-system-for-read' `%s', by
stock `call-process' and by `fastrevert-call-process'.  The limit is the command with its
output written to a file plus `insert-file-contents' of that output (medians).

%s\n\n"
   fastrevert-bench-coding fastrevert-bench-workload--timing-text)
  (fastrevert-bench--print-table
   (append '("command" "output") fastrevert-bench-workload--timing-columns
           '("limit ms" "fastrevert/limit"))
   rows))

(defun fastrevert-bench-workload--print-async (rows)
  "Print the asynchronous table from ROWS."
  (fastrevert-bench--heading
   "Workload: asynchronous processes, as compile, grep and LSP clients run them")
  (fastrevert-bench--out
   "Stock `make-process' (pipe, `read-process-output-max' %d unless the row says
otherwise) beside `fastrevert-make-process', each waited for one of two ways: on the
process (`accept-process-output' on it, `fastrevert-accept-process-output'), as a
client that waits for its reply does; or in the event loop (`accept-process-output'
on nil), as the command loop waits while M-x grep and M-x compile stream into their
buffers.  Into a buffer: the default filter.  To a filter: it counts what it gets.
By lines and LSP: stock's filter splits the stream as clients do (jsonrpc.el's way for
LSP), fastrevert's gets complete lines or messages from `:framing'.

%s  \"main ms\" is the main thread's own processor
time a call (its schedstat), at the median round; \"main f/s\" is fastrevert's over
stock's (below 1, fastrevert takes less).\n\n"
   read-process-output-max fastrevert-bench-workload--timing-text)
  (fastrevert-bench--print-table
   (append (cons "workload" fastrevert-bench-workload--timing-columns)
           '("stock main ms" "fastrevert main ms" "main f/s"))
   rows))

(add-hook 'fastrevert-bench-sections #'fastrevert-bench-workload-run 30)

(provide 'fastrevert-bench-workload)

;;; fastrevert-bench-workload.el ends here
