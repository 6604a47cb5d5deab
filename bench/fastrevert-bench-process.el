;;; fastrevert-bench-process.el --- Process benchmarks: fastrevert beside stock -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; Keywords: processes, tools

;;; Commentary:

;; The process part of `make bench' (DESIGN.md, benchmark item 3).
;; fastrevert-bench.el loads this file (after fastrevert itself, or
;; at any time: the registrations wait for the harness); it then
;;
;; - registers `fastrevert' columns for the harness's `output' table
;;   (50 MiB into a buffer: `fastrevert-make-process' for the
;;   make-process rows, `fastrevert-call-process' for the call-process
;;   row) and `spawn' table (`ls /' many times), beside the stock
;;   columns of the same run;
;;
;; - adds `fastrevert-bench-process-run-tables' to
;;   `fastrevert-bench-full-sections', which prints four tables of its own,
;;   each cell a `benchmark-run' triple (elapsed s, GCs, GC s):
;;   1. small (100 B) and ~50 KB outputs read N times at
;;      `read-process-output-max' 4096, 40960 and 409600, stock against
;;      fastrevert, with `call-process' and `insert-file-contents';
;;   2. 50 MiB to a filter;
;;   3. N small processes (`ls /') against bench/cbaseline.c, a plain C
;;      posix_spawn + read + waitpid loop (built here with cc when no
;;      built copy is found);
;;   4. tables 3 and the 50 MiB buffer rows again after an
;;      allocation-heavy "aging" phase, with after/before ratios.
;;
;; N is 1000, or 50 with FASTREVERT_BENCH_QUICK.

;;; Code:

(require 'benchmark)
(require 'cl-lib)

(declare-function fastrevert-bench-define "fastrevert-bench" (case column &rest props))
(declare-function fastrevert-bench-quick-p "fastrevert-bench" ())
(declare-function fastrevert-bench-measure-into-buffer "fastrevert-bench"
                  (repeats expected-size fill))
(declare-function fastrevert-bench-wait-for-exit "fastrevert-bench" (proc))
(declare-function fastrevert-bench-time-spawns "fastrevert-bench" (count run))
(declare-function fastrevert-bench--heading "fastrevert-bench" (title))
(declare-function fastrevert-bench--out "fastrevert-bench" (format-string &rest args))
(declare-function fastrevert-bench--progress "fastrevert-bench" (format-string &rest args))
(declare-function fastrevert-bench-median "fastrevert-bench" (numbers))
(declare-function fastrevert-bench--loud "fastrevert-bench" (format-string &rest args))
(declare-function fastrevert-bench--print-table "fastrevert-bench" (header rows))
(declare-function fastrevert-bench--fmt "fastrevert-bench" (format-string value))
(declare-function fastrevert-bench--make-data-file "fastrevert-bench" (file size))
(declare-function fastrevert-bench-implementation-available-p "fastrevert-bench" (impl))
(declare-function fastrevert-bench-size "fastrevert-bench" (key))
(defvar fastrevert-bench-full-sections)
(declare-function fastrevert-make-process "fastrevert-process" (&rest args))
(declare-function fastrevert-call-process "fastrevert-call"
                  (program &optional infile destination display &rest args))
(declare-function fastrevert-accept-process-output "fastrevert-process"
                  (&optional process seconds millisec just-this-one))
(declare-function fastrevert-delete-process "fastrevert-process" (process))
(defvar fastrevert-bench-coding)
(defvar fastrevert-bench-process-timeout)

(defconst fastrevert-bench-process--directory
  (file-name-directory (or load-file-name buffer-file-name default-directory))
  "The bench directory, where cbaseline.c lives.")

;;;; Running one process to completion

(defvar fastrevert-bench-process--compiled nil
  "Non-nil once the process layer's functions have been compiled.")

(defun fastrevert-bench-process--compile-layer ()
  "Byte-compile the functions of the process layer if loaded as source.
That is fastrevert-process.el, fastrevert-call.el and the libraries
they stand on.
`make bench' loads the .el files, and interpreted Lisp would charge
fastrevert's columns for the interpreter (and its consing) where a
user's installed package runs compiled code."
  (unless fastrevert-bench-process--compiled
    (setq fastrevert-bench-process--compiled t)
    (let ((libraries (mapcar #'locate-library
                             '("fastrevert-engine" "fastrevert-decode" "fastrevert-child"
                               "fastrevert-process" "fastrevert-call")))
          (symbols nil))
      (mapatoms
       (lambda (symbol)
         (when (and (fboundp symbol)
                    (string-prefix-p "fastrevert-" (symbol-name symbol))
                    (memq (car-safe (symbol-function symbol)) '(closure lambda))
                    (member (symbol-file symbol 'defun) libraries))
           (push symbol symbols))))
      (mapc #'byte-compile symbols))))

(defun fastrevert-bench-process--available-p ()
  "Return non-nil if fastrevert's process layer can be measured."
  (and (featurep 'fastrevert)
       (require 'fastrevert-process nil t)
       (progn (fastrevert-bench-process--compile-layer) t)))

(defun fastrevert-bench-process--fastrevert (buffer command &optional filter)
  "Run COMMAND with `fastrevert-make-process' into BUFFER and wait for it.
FILTER, when non-nil, receives the output instead of BUFFER.  The
sentinel only notes the end, so that nothing is added to BUFFER."
  (let* ((done nil)
         (deadline (+ (float-time) fastrevert-bench-process-timeout))
         (coding-system-for-read fastrevert-bench-coding)
         (process (fastrevert-make-process :name "fastrevert-bench" :buffer buffer
                                           :command command :noquery t
                                           :coding fastrevert-bench-coding
                                           :filter filter
                                           :sentinel (lambda (_process _event) (setq done t)))))
    (while (not done)
      (fastrevert-accept-process-output process 1.0)
      (when (> (float-time) deadline)
        (fastrevert-delete-process process)
        (error "Benchmark process did not finish in %s s" fastrevert-bench-process-timeout)))))

(defun fastrevert-bench-process--stock (buffer command &optional filter)
  "Run COMMAND with stock `make-process' into BUFFER and wait for it.
FILTER, when non-nil, receives the output instead of BUFFER."
  (let ((coding-system-for-read fastrevert-bench-coding)
        (coding-system-for-write fastrevert-bench-coding))
    (fastrevert-bench-wait-for-exit
     (apply #'make-process :name "fastrevert-bench-stock" :buffer buffer
            :command command :connection-type 'pipe :noquery t :sentinel #'ignore
            (and filter (list :filter filter))))))

(defun fastrevert-bench-process--call (function program &rest args)
  "Call FUNCTION (a `call-process') on PROGRAM with ARGS into the current buffer."
  (let* ((coding-system-for-read fastrevert-bench-coding)
         (status (apply function program nil t nil args)))
    (unless (eql status 0)
      (error "%s exited with %S" program status))))

;;;; Columns in the harness's tables

(defun fastrevert-bench-process--output (row file runs)
  "Measure fastrevert reading FILE into fresh buffers for harness ROW.
RUNS is the number of repetitions."
  (let ((size (file-attribute-size (file-attributes file)))
        (command (list "cat" file)))
    (pcase row
      ((or 'make-process-4096 'make-process-65536)
       (let ((rpom (if (eq row 'make-process-4096) 4096 65536)))
         (fastrevert-bench-measure-into-buffer
          runs size
          (lambda (buffer)
            (let ((read-process-output-max rpom))
              (fastrevert-bench-process--fastrevert buffer command))))))
      ('call-process
       (fastrevert-bench-measure-into-buffer
        runs size
        (lambda (_buffer)
          (fastrevert-bench-process--call #'fastrevert-call-process "cat" file))))
      (_ nil))))

(defun fastrevert-bench-process--spawn (row count)
  "Run `ls /' COUNT times with the fastrevert method for harness ROW."
  (fastrevert-bench-time-spawns
   count
   (pcase row
     ('make-process
      (lambda () (fastrevert-bench-process--fastrevert (current-buffer) '("ls" "/"))))
     ('call-process
      (lambda () (fastrevert-call-process "ls" nil t nil "/")))
     (_ (error "Unknown spawn row %S" row)))))

;;;; Table 1: small and ~50 KB outputs

(defun fastrevert-bench-process--repeat (count thunk expected)
  "Call THUNK COUNT times in a scratch buffer, emptied before each call.
Return (TRIPLE . BAD): the `benchmark-run' triple over all calls and
how many calls left other than EXPECTED characters."
  (let ((buffer (generate-new-buffer " *fastrevert-bench-repeat*"))
        (bad 0))
    (unwind-protect
        (with-current-buffer buffer
          (buffer-disable-undo)
          (garbage-collect)
          (let ((triple (benchmark-run 1
                          (dotimes (_ count)
                            (erase-buffer)
                            (funcall thunk buffer)
                            (unless (= (buffer-size) expected)
                              (setq bad (1+ bad)))))))
            (cons triple bad)))
      (kill-buffer buffer))))

(defun fastrevert-bench-process--count ()
  "Return the number of repetitions in a per-process cell."
  (if (fastrevert-bench-quick-p) 50 1000))

(defun fastrevert-bench-process--ratio-cell (triple reference)
  "Return the cell for TRIPLE's elapsed time over REFERENCE's, or \"-\"."
  (fastrevert-bench--fmt "%.2f" (and triple reference (> (car reference) 0)
                                     (/ (car triple) (car reference)))))

(defun fastrevert-bench-process--triple-cells (triple &optional baseline)
  "Return table cells for TRIPLE, with its ratio to BASELINE's elapsed time."
  (list (fastrevert-bench--fmt "%.3f" (nth 0 triple))
        (fastrevert-bench--fmt "%d" (nth 1 triple))
        (fastrevert-bench--fmt "%.3f" (nth 2 triple))
        (fastrevert-bench-process--ratio-cell triple baseline)))

(defun fastrevert-bench-process--note-bad (label bad)
  "Report loudly that LABEL produced BAD wrong results, if BAD is positive."
  (when (> bad 0)
    (fastrevert-bench--loud "%s: %d runs produced the wrong amount of output" label bad)))

(defun fastrevert-bench-process--small-outputs (root)
  "Measure small and ~50 KB outputs under ROOT; print the table."
  (let* ((count (fastrevert-bench-process--count))
         (fastrevert (fastrevert-bench-implementation-available-p 'fastrevert))
         (rows nil))
    (dolist (size '(100 51200))
      (let ((file (expand-file-name (format "out-%d.txt" size) root)))
        (fastrevert-bench--make-data-file file size)
        (let* ((command (list "cat" file))
               (measure
                (lambda (label thunk)
                  (fastrevert-bench--progress "small outputs: %d B, %s" size label)
                  (let ((result (fastrevert-bench-process--repeat count thunk size)))
                    (fastrevert-bench-process--note-bad (format "%d B, %s" size label)
                                                        (cdr result))
                    (car result)))))
          (dolist (rpom '(4096 40960 409600))
            (let* ((stock (funcall measure (format "stock make-process rpom %d" rpom)
                                   (lambda (buffer)
                                     (let ((read-process-output-max rpom))
                                       (fastrevert-bench-process--stock buffer command)))))
                   (native (and fastrevert
                                (funcall measure (format "fastrevert-make-process rpom %d" rpom)
                                         (lambda (buffer)
                                           (let ((read-process-output-max rpom))
                                             (fastrevert-bench-process--fastrevert
                                              buffer command)))))))
              (push (append (list (format "%d B" size) (format "make-process, rpom %d" rpom))
                            (fastrevert-bench-process--triple-cells stock)
                            (fastrevert-bench-process--triple-cells native stock))
                    rows)))
          (let* ((stock (funcall measure "stock call-process"
                                 (lambda (_buffer)
                                   (fastrevert-bench-process--call #'call-process "cat" file))))
                 (native (and fastrevert
                              (funcall measure "fastrevert-call-process"
                                       (lambda (_buffer)
                                         (fastrevert-bench-process--call
                                          #'fastrevert-call-process "cat" file))))))
            (push (append (list (format "%d B" size) "call-process")
                          (fastrevert-bench-process--triple-cells stock)
                          (fastrevert-bench-process--triple-cells native stock))
                  rows))
          (let ((stock (funcall measure "insert-file-contents"
                                (lambda (_buffer)
                                  (let ((coding-system-for-read fastrevert-bench-coding))
                                    (insert-file-contents file))))))
            (push (append (list (format "%d B" size) "insert-file-contents (no process)")
                          (fastrevert-bench-process--triple-cells stock)
                          (list "-" "-" "-" "-" "-"))
                  rows)))
        (delete-file file)))
    (fastrevert-bench--heading
     (format "Process output: small and ~50 KB outputs, %d runs per cell" count))
    (fastrevert-bench--out
     "Each cell is one `benchmark-run' triple over %d runs of `cat FILE' into an \
emptied buffer
(undo off), waiting for exit and all output.  rpom = `read-process-output-max' \
bound while
the process runs (fastrevert's first read size).  ratio = fastrevert elapsed / \
stock elapsed.\n\n"
     count)
    (fastrevert-bench--print-table
     '("output" "method" "stock elapsed s" "stock GCs" "stock GC s"
       "fastrevert elapsed s" "fastrevert GCs" "fastrevert GC s" "ratio")
     (mapcar (lambda (row)
               ;; The stock group has no ratio of its own.
               (append (cl-subseq row 0 5) (cl-subseq row 6)))
             (nreverse rows)))))

;;;; Table 2: 50 MiB to a filter

(defun fastrevert-bench-process--filter-table (root)
  "Measure 50 MiB (5 MiB when quick) to a filter under ROOT; print the table."
  (let* ((size (fastrevert-bench-size :output-bytes))
         (runs (fastrevert-bench-size :output-runs))
         (file (expand-file-name "filter.txt" root))
         (command (list "cat" file))
         (rows nil))
    (fastrevert-bench--make-data-file file size)
    (unwind-protect
        (dolist (method '(stock-4096 stock-65536 fastrevert fastrevert-lines))
          (when (or (memq method '(stock-4096 stock-65536))
                    (fastrevert-bench-implementation-available-p 'fastrevert))
            (fastrevert-bench--progress "filter: %s" method)
            (let ((triples nil) (bad 0))
              (dotimes (_ runs)
                (let* ((received 0)
                       (filter (lambda (_process text)
                                 (setq received (+ received (length text))))))
                  (garbage-collect)
                  (push (benchmark-run 1
                          (pcase method
                            ('stock-4096
                             (let ((read-process-output-max 4096))
                               (fastrevert-bench-process--stock nil command filter)))
                            ('stock-65536
                             (let ((read-process-output-max 65536))
                               (fastrevert-bench-process--stock nil command filter)))
                            ('fastrevert
                             (fastrevert-bench-process--fastrevert nil command filter))
                            ('fastrevert-lines
                             (let* ((done nil)
                                    (process (fastrevert-make-process
                                              :name "fastrevert-bench-lines" :command command
                                              :noquery t :coding fastrevert-bench-coding
                                              :framing 'lines :filter filter
                                              :sentinel (lambda (_p _e) (setq done t)))))
                               (while (not done)
                                 (fastrevert-accept-process-output process 1.0))))))
                        triples)
                  (unless (= received size) (setq bad (1+ bad)))))
              (fastrevert-bench-process--note-bad (format "filter, %s" method) bad)
              (let ((n (float (length triples))))
                (push (list (symbol-name method)
                            (/ (apply #'+ (mapcar #'car triples)) n)
                            (/ (apply #'+ (mapcar #'cadr triples)) n)
                            (/ (apply #'+ (mapcar #'caddr triples)) n))
                      rows)))))
      (delete-file file))
    (setq rows (nreverse rows))
    (fastrevert-bench--heading
     (format "Process output: %.0f MiB to a filter" (/ size 1048576.0)))
    (fastrevert-bench--out
     "The filter only counts characters.  Means of %d run(s); ratio = elapsed / \
stock rpom 65536.
fastrevert-lines uses :framing 'lines (the filter sees complete lines only).\n\n"
     runs)
    (let ((baseline (nth 1 (assoc "stock-65536" rows))))
      (fastrevert-bench--print-table
       '("method" "elapsed s" "GCs" "GC s" "ratio")
       (mapcar (lambda (row)
                 (list (nth 0 row)
                       (fastrevert-bench--fmt "%.3f" (nth 1 row))
                       (fastrevert-bench--fmt "%.1f" (nth 2 row))
                       (fastrevert-bench--fmt "%.3f" (nth 3 row))
                       (fastrevert-bench--fmt "%.2f" (and baseline (/ (nth 1 row) baseline)))))
               rows)))))

;;;; Table 3: many small processes against C

(defun fastrevert-bench-process--cbaseline (root)
  "Return the cbaseline executable, building it under ROOT if needed, or nil."
  (let* ((here fastrevert-bench-process--directory)
         (source (expand-file-name "cbaseline.c" here))
         (built (cl-find-if (lambda (file) (and file (file-executable-p file)))
                            (list (getenv "FASTREVERT_CBASELINE")
                                  (expand-file-name "../build/cbaseline" here)
                                  (expand-file-name "../build-release/cbaseline" here)))))
    (or built
        (let ((exe (expand-file-name "cbaseline" root)))
          (and (file-exists-p source)
               (executable-find "cc")
               (eql 0 (call-process "cc" nil nil nil "-O2" "-o" exe source))
               exe)))))

(defvar fastrevert-bench-process--cbaseline-file nil
  "The cbaseline executable found for this run.")

(defconst fastrevert-bench-process--cbaseline-label
  "C posix_spawn + read + waitpid (cbaseline)"
  "The label of the C loop's row in the spawn tables.")

(defun fastrevert-bench-process--cbaseline-seconds (cbaseline count)
  "Run `ls /' COUNT times with the C loop CBASELINE; return its elapsed seconds."
  (let ((fields (split-string (car (process-lines cbaseline (number-to-string count)
                                                  "ls" "/")))))
    (string-to-number (car fields))))

(defun fastrevert-bench-process--spawn-rows (root)
  "Measure `ls /' many times with every method under ROOT.
The runs are split into rounds; each round runs the C loop and then
every method the same number of times, so that the machine's drift
over the run touches all of them alike.  Return a list of (LABEL
TRIPLE RATIO) rows, the C loop first: TRIPLE sums the rounds'
`benchmark-run' triples, RATIO is the median over the rounds of the
method's time divided by the C loop's time in the same round."
  (let* ((count (fastrevert-bench-process--count))
         (rounds (if (fastrevert-bench-quick-p) 2 5))
         (per-round (/ count rounds))
         (cbaseline (or fastrevert-bench-process--cbaseline-file
                        (setq fastrevert-bench-process--cbaseline-file
                              (fastrevert-bench-process--cbaseline root))))
         (expected (with-temp-buffer (call-process "ls" nil t nil "/") (buffer-size)))
         (methods
          (append
           (list (cons "stock make-process + accept-process-output"
                       (lambda (buffer) (fastrevert-bench-process--stock buffer '("ls" "/"))))
                 (cons "stock call-process"
                       (lambda (_buffer) (fastrevert-bench-process--call
                                          #'call-process "ls" "/"))))
           (and (fastrevert-bench-implementation-available-p 'fastrevert)
                (list (cons "fastrevert-make-process + fastrevert-accept-process-output"
                            (lambda (buffer) (fastrevert-bench-process--fastrevert
                                              buffer '("ls" "/"))))
                      (cons "fastrevert-call-process"
                            (lambda (_buffer) (fastrevert-bench-process--call
                                               #'fastrevert-call-process "ls" "/")))))))
         ;; Label -> (TRIPLE . RATIOS), accumulated over the rounds.
         (results (mapcar (lambda (method) (list (car method) (list 0.0 0 0.0))) methods))
         (c-total 0.0))
    (dotimes (round rounds)
      (fastrevert-bench--progress "processes: round %d of %d, %d runs per method"
                                  (1+ round) rounds per-round)
      (let ((c-seconds (and cbaseline
                            (fastrevert-bench-process--cbaseline-seconds cbaseline per-round))))
        (when c-seconds (setq c-total (+ c-total c-seconds)))
        (dolist (method methods)
          (let* ((result (fastrevert-bench-process--repeat per-round (cdr method) expected))
                 (triple (car result))
                 (entry (assoc (car method) results)))
            (fastrevert-bench-process--note-bad (car method) (cdr result))
            (setf (cadr entry) (cl-mapcar #'+ (cadr entry) triple))
            (when (and c-seconds (> c-seconds 0))
              (setcdr (cdr entry) (cons (/ (car triple) c-seconds) (cddr entry))))))))
    (append
     (and cbaseline
          (list (list fastrevert-bench-process--cbaseline-label (list c-total 0 0.0) 1.0)))
     (mapcar (lambda (entry)
               (list (car entry) (cadr entry)
                     (and (cddr entry) (fastrevert-bench-median (cddr entry)))))
             results))))

(defun fastrevert-bench-process--row-cells (rows before gc-format &optional extra)
  "Return the table cells of ROWS, (LABEL TRIPLE RATIO) each.
A row's cells are its label, the TRIPLE's elapsed seconds, GC count,
formatted with GC-FORMAT, and GC seconds, the cells EXTRA returns
for the TRIPLE, and RATIO; with BEFORE, the same rows measured
earlier, then the earlier time and the after/before ratio."
  (mapcar (lambda (row)
            (let* ((triple (nth 1 row))
                   (earlier (cadr (assoc (car row) before))))
              (append (list (car row)
                            (fastrevert-bench--fmt "%.3f" (nth 0 triple))
                            (fastrevert-bench--fmt gc-format (nth 1 triple))
                            (fastrevert-bench--fmt "%.3f" (nth 2 triple)))
                      (and extra (funcall extra triple))
                      (list (fastrevert-bench--fmt "%.2f" (nth 2 row)))
                      (and before
                           (list (fastrevert-bench--fmt "%.3f" (car earlier))
                                 (fastrevert-bench-process--ratio-cell triple earlier))))))
          rows))

(defun fastrevert-bench-process--print-spawn-rows (title rows &optional before)
  "Print ROWS of `fastrevert-bench-process--spawn-rows' under TITLE.
BEFORE, when given, are the same rows measured earlier: their time
and the after/before ratio are shown too."
  (let* ((count (fastrevert-bench-process--count))
         (measured (assoc fastrevert-bench-process--cbaseline-label rows)))
    (fastrevert-bench--heading title)
    (fastrevert-bench--out
     "`ls /' %d times per method, in %d rounds; each run waits for exit and all output.
Elapsed, GCs and GC s sum the rounds' `benchmark-run' triples.  x C is the median
over the rounds of elapsed / the C loop's elapsed in the same round (cbaseline.c: %s).\n\n"
     count (if (fastrevert-bench-quick-p) 2 5) (if measured "measured" "not built, no cc"))
    (fastrevert-bench--print-table
     (append '("method" "elapsed s" "GCs" "GC s" "ms/process" "x C")
             (and before '("before s" "after/before")))
     (fastrevert-bench-process--row-cells
      rows before "%d"
      (lambda (triple)
        (list (fastrevert-bench--fmt "%.3f" (/ (* 1000 (nth 0 triple)) count))))))))

;;;; Table 4: after aging

(defvar fastrevert-bench-process--aged-heap nil
  "Data kept live during the aged measurements.")

(defun fastrevert-bench-process--age ()
  "Make the heap look like a long session's: large, live and fragmented.
Allocate a few hundred MB of conses, strings, vectors and buffers,
keep about a third of them live and drop the rest, then collect."
  (let ((keep nil)
        (rounds (if (fastrevert-bench-quick-p) 1 3)))
    (dotimes (round rounds)
      (let ((batch nil))
        (dotimes (i 200000)
          (push (cons i (make-string (+ 8 (% i 64)) ?x)) batch)
          (when (zerop (% i 997))
            (push (make-vector 64 i) batch)))
        ;; Keep every third object, so that live data are scattered
        ;; across the heap's blocks.
        (let ((n 0))
          (dolist (object batch)
            (when (zerop (% (setq n (1+ n)) 3))
              (push object keep)))))
      (let ((buffer (generate-new-buffer (format " *fastrevert-bench-aging-%d*" round))))
        (with-current-buffer buffer
          (dotimes (i 20000) (insert (format "line %d of an old buffer\n" i))))
        (push buffer keep))
      (garbage-collect))
    (setq fastrevert-bench-process--aged-heap keep)))

(defun fastrevert-bench-process--release-aged-heap ()
  "Drop the data kept live by `fastrevert-bench-process--age'."
  (dolist (object fastrevert-bench-process--aged-heap)
    (when (bufferp object) (kill-buffer object)))
  (setq fastrevert-bench-process--aged-heap nil)
  (garbage-collect))

(defun fastrevert-bench-process--buffer-rows (root)
  "Measure 50 MiB into a buffer with each method under ROOT.
The runs are interleaved: each round runs every method once, stock
`insert-file-contents' first, so that the machine's drift touches all
methods alike.  Return (LABEL TRIPLE RATIO) rows: TRIPLE is the mean
`benchmark-run' triple, RATIO the median over the rounds of the
method's time divided by `insert-file-contents' time in that round."
  (let* ((size (fastrevert-bench-size :output-bytes))
         (runs (fastrevert-bench-size :output-runs))
         (file (expand-file-name "aged.txt" root))
         (command (list "cat" file))
         (methods
          (append
           (list (cons "stock insert-file-contents"
                       (lambda (_buffer)
                         (let ((coding-system-for-read fastrevert-bench-coding))
                           (insert-file-contents file))))
                 (cons "stock make-process, rpom 65536"
                       (lambda (buffer)
                         (let ((read-process-output-max 65536))
                           (fastrevert-bench-process--stock buffer command))))
                 (cons "stock call-process"
                       (lambda (_buffer)
                         (fastrevert-bench-process--call #'call-process "cat" file))))
           (and (fastrevert-bench-implementation-available-p 'fastrevert)
                (list (cons "fastrevert-make-process"
                            (lambda (buffer) (fastrevert-bench-process--fastrevert buffer command)))
                      (cons "fastrevert-call-process"
                            (lambda (_buffer)
                              (fastrevert-bench-process--call
                               #'fastrevert-call-process "cat" file)))))))
         ;; Label -> (TRIPLES RATIOS), newest first.
         (results (mapcar (lambda (method) (list (car method) nil nil)) methods)))
    (fastrevert-bench--make-data-file file size)
    (unwind-protect
        (dotimes (round runs)
          (fastrevert-bench--progress "buffer: round %d of %d" (1+ round) runs)
          (let ((reference nil))
            (dolist (method methods)
              (let* ((result (fastrevert-bench-measure-into-buffer 1 size (cdr method)))
                     (triple (car (plist-get result :triples)))
                     (entry (assoc (car method) results)))
                (when (plist-get result :bad)
                  (fastrevert-bench--loud "SIZE MISMATCH: %s: %S" (car method)
                                          (plist-get result :bad)))
                (unless reference (setq reference (car triple)))
                (push triple (nth 1 entry))
                (when (> reference 0)
                  (push (/ (car triple) reference) (nth 2 entry)))))))
      (delete-file file))
    (mapcar (lambda (entry)
              (let* ((triples (nth 1 entry))
                     (n (float (length triples))))
                (list (car entry)
                      (list (/ (apply #'+ (mapcar #'car triples)) n)
                            (/ (apply #'+ (mapcar #'cadr triples)) n)
                            (/ (apply #'+ (mapcar #'caddr triples)) n))
                      (and (nth 2 entry) (fastrevert-bench-median (nth 2 entry))))))
            results)))

(defun fastrevert-bench-process--print-buffer-rows (title rows &optional before)
  "Print the 50 MiB buffer ROWS under TITLE, with BEFORE for comparison."
  (fastrevert-bench--heading title)
  (fastrevert-bench--out
   "Means per run over %d interleaved rounds; x ifc = the median over the rounds of
elapsed / stock insert-file-contents of the same bytes in the same round.\n\n"
   (fastrevert-bench-size :output-runs))
  (fastrevert-bench--print-table
   (append '("method" "elapsed s" "GCs" "GC s" "x ifc")
           (and before '("before s" "after/before")))
   (fastrevert-bench-process--row-cells rows before "%.1f")))

;;;; Entry point

(defun fastrevert-bench-process-run-tables (root)
  "Run and print the process tables of this file, under directory ROOT."
  (fastrevert-bench-process--available-p)
  (let ((spawn (fastrevert-bench-process--spawn-rows root))
        (buffer (fastrevert-bench-process--buffer-rows root)))
    (fastrevert-bench-process--small-outputs root)
    (fastrevert-bench-process--filter-table root)
    (fastrevert-bench-process--print-spawn-rows
     "Many small processes against a plain C loop" spawn)
    (fastrevert-bench-process--print-buffer-rows
     (format "Process output: %.0f MiB into a buffer, all methods"
             (/ (fastrevert-bench-size :output-bytes) 1048576.0))
     buffer)
    (fastrevert-bench--progress "aging the heap")
    (let ((start (float-time)))
      (fastrevert-bench-process--age)
      (unwind-protect
          (let ((aged-spawn (fastrevert-bench-process--spawn-rows root))
                (aged-buffer (fastrevert-bench-process--buffer-rows root)))
            (fastrevert-bench--out
             "\nAging: %.1f s of allocation; %d objects and buffers kept live; \
`memory-use-counts' %S.\n"
             (- (float-time) start) (length fastrevert-bench-process--aged-heap)
             (memory-use-counts))
            (fastrevert-bench-process--print-spawn-rows
             "After aging: many small processes" aged-spawn spawn)
            (fastrevert-bench-process--print-buffer-rows
             (format "After aging: %.0f MiB into a buffer"
                     (/ (fastrevert-bench-size :output-bytes) 1048576.0))
             aged-buffer buffer))
        (fastrevert-bench-process--release-aged-heap)))))

(with-eval-after-load 'fastrevert-bench
  (fastrevert-bench-define 'output 'fastrevert
    :impl 'fastrevert :header "fastrevert"
    :function (lambda (row file runs)
                (and (fastrevert-bench-process--available-p)
                     (fastrevert-bench-process--output row file runs))))
  (fastrevert-bench-define 'spawn 'fastrevert
    :impl 'fastrevert :header "fastrevert"
    :function (lambda (row count)
                (and (fastrevert-bench-process--available-p)
                     (fastrevert-bench-process--spawn row count))))
  ;; The process details go with the full run; the headline has the
  ;; workload table (fastrevert-bench-workload.el).
  (add-hook 'fastrevert-bench-full-sections #'fastrevert-bench-process-run-tables 50))

(provide 'fastrevert-bench-process)

;;; fastrevert-bench-process.el ends here
