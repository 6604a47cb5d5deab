;;; fastrevert-process-order-test.el --- Output in order under nesting -*- lexical-binding: t; -*-

;;; Commentary:

;; Many `fastrevert-make-process' children at once, whose filters wait
;; for more output (`fastrevert-accept-process-output' inside a filter,
;; nested up to three deep), start further children while they wait, and
;; feed a child's standard input.  Their output is read by whichever
;; thread has the child at that moment: the thread that waits in Lisp,
;; the engine, or one and then the other.  Whatever the path, every
;; stream must reach its filter once, byte for byte and in order; a
;; filter must never be called while it runs; and a sentinel must come
;; once, after all output.  Some rounds start from a fresh engine, so
;; that their first child is the engine's very first.
;;
;; Each round draws its children and its filters' behaviour from a
;; seeded generator.  The seed is FASTREVERT_TEST_SEED when set (see
;; test/stress.sh), else random; a failure message gives it, with the
;; round, so that the same rounds can be run again:
;;
;;   FASTREVERT_TEST_SEED=SEED ctest --test-dir build \
;;     -R ert.fastrevert-process-order-test --output-on-failure

;;; Code:

(require 'fastrevert-test-helpers)

(require 'fastrevert)
(require 'fastrevert-process)

;;;; A seeded generator

(defconst fastrevert-order-test--seed
  (let ((given (getenv "FASTREVERT_TEST_SEED")))
    (if (and given (string-match-p "\\`[0-9]+\\'" given))
        (string-to-number given)
      (random t)
      (random 4294967296)))
  "The seed of this run: FASTREVERT_TEST_SEED when set, else random.")

(defvar fastrevert-order-test--state 1
  "The state of the round's generator.
The test keeps a generator of its own rather than `random''s, which
any Lisp that runs during a wait may draw from too.")

(defun fastrevert-order-test--reseed (seed)
  "Start the generator at SEED."
  (setq fastrevert-order-test--state (1+ (mod seed 2147483647))))

(defun fastrevert-order-test--random (n)
  "Return a number in [0, N) from the generator."
  ;; Park and Miller's minimal standard generator: the state stays in
  ;; [1, 2^31 - 2], and its products fit in a fixnum.
  (setq fastrevert-order-test--state (mod (* fastrevert-order-test--state 48271) 2147483647))
  (mod fastrevert-order-test--state n))

(defun fastrevert-order-test--chance (percent)
  "Return non-nil PERCENT times in a hundred."
  (< (fastrevert-order-test--random 100) percent))

(defun fastrevert-order-test--between (low high)
  "Return a number in [LOW, HIGH]."
  (+ low (fastrevert-order-test--random (1+ (- high low)))))

(defun fastrevert-order-test--bytes (size)
  "Return SIZE bytes from the generator, as a unibyte string."
  (let ((bytes (make-string size 0)))
    (dotimes (i size)
      (aset bytes i (fastrevert-order-test--random 256)))
    bytes))

;;;; Children

(cl-defstruct (fastrevert-order-test--child
               (:constructor fastrevert-order-test--child-create)
               (:copier nil))
  "A child of a round: what it runs, what it must write, what it got."
  (label nil :documentation "A name for messages, such as \"seq-3\".")
  (command nil :documentation "The command line.")
  (expected nil :documentation "Every byte it writes, a unibyte string.
For a child fed on its standard input, what was sent so far.")
  (input nil :documentation "Pieces of standard input still to send, oldest first.")
  (process nil :documentation "Its `fastrevert-process', once started.")
  (chunks nil :documentation "The strings its filter got, newest first.")
  (in-filter nil :documentation "Non-nil while its filter runs.")
  (events nil :documentation "The events its sentinel got, newest first.")
  (waits 0 :documentation "How often, in percent, its filter waits for more output.")
  (work 0 :documentation "Milliseconds its filter computes for, each call.")
  (faults nil :documentation "What went wrong, newest first."))

(defvar fastrevert-order-test--binary nil
  "A file of random bytes that children print slices of.")

(defvar fastrevert-order-test--binary-bytes nil
  "The contents of `fastrevert-order-test--binary'.")

(defun fastrevert-order-test--seq-output (first last)
  "Return what seq FIRST LAST prints, as stock `call-process' gets it."
  (with-temp-buffer
    (set-buffer-multibyte nil)
    (let ((coding-system-for-read 'binary))
      (call-process "seq" nil t nil (number-to-string first) (number-to-string last)))
    (buffer-string)))

(defun fastrevert-order-test--seq-child (label)
  "Return a child named after LABEL printing numbers with seq, often megabytes.
A stream that outgrows a wait is read at first by the thread that
waits, then by the engine."
  (let* ((first (fastrevert-order-test--random 1000))
         (last (+ first (if (fastrevert-order-test--chance 70)
                            (fastrevert-order-test--between 20000 300000)
                          (fastrevert-order-test--between 0 3000)))))
    (fastrevert-order-test--child-create
     :label (format "seq-%s" label)
     :command (list "seq" (number-to-string first) (number-to-string last))
     :expected (fastrevert-order-test--seq-output first last))))

(defun fastrevert-order-test--lines-child (label)
  "Return a child named after LABEL that writes short lines with pauses.
It waits between its writes, as a build or a language server does."
  (let ((lines (fastrevert-order-test--between 3 30))
        (pause (fastrevert-order-test--between 1 3)))
    (fastrevert-order-test--child-create
     :label (format "lines-%s" label)
     :command (list "sh" "-c"
                    (format "i=0; while [ $i -lt %d ]; do \
echo %s-$i; i=$((i+1)); sleep 0.00%d; done"
                            lines label pause))
     :expected (mapconcat (lambda (i) (format "%s-%d\n" label i))
                          (number-sequence 0 (1- lines)) ""))))

(defun fastrevert-order-test--bytes-child (label)
  "Return a child named after LABEL that writes slices of random bytes.
Every byte value comes, in one burst or in slices with pauses."
  (let ((total (length fastrevert-order-test--binary-bytes))
        (parts nil)
        (expected nil))
    (dotimes (_ (fastrevert-order-test--between 1 6))
      (let* ((size (fastrevert-order-test--between
                    1 (if (fastrevert-order-test--chance 50) 200000 5000)))
             (start (fastrevert-order-test--random (- total size))))
        (push (format "tail -c +%d %s | head -c %d" (1+ start)
                      (shell-quote-argument fastrevert-order-test--binary) size)
              parts)
        (push (substring fastrevert-order-test--binary-bytes start (+ start size)) expected)))
    (fastrevert-order-test--child-create
     :label (format "bytes-%s" label)
     :command (list "sh" "-c" (mapconcat #'identity (nreverse parts)
                                         (format "; sleep 0.00%d; "
                                                 (fastrevert-order-test--between 1 5))))
     :expected (apply #'concat (nreverse expected)))))

(defun fastrevert-order-test--cat-child (label)
  "Return a child named after LABEL that writes back its standard input.
Each piece sent hands the child to the engine if the waiting thread
had it."
  (let ((input nil))
    (dotimes (_ (fastrevert-order-test--between 1 4))
      (push (fastrevert-order-test--bytes
             (fastrevert-order-test--between
              1 (if (fastrevert-order-test--chance 30) 40000 300)))
            input))
    (fastrevert-order-test--child-create
     :label (format "cat-%s" label) :command (list "cat") :expected "" :input input)))

(defun fastrevert-order-test--make-child (label)
  "Return a new child for the round, LABEL naming it, drawn from the generator."
  (let* ((kind (fastrevert-order-test--random 100))
         (child (funcall (cond ((< kind 30) #'fastrevert-order-test--seq-child)
                               ((< kind 60) #'fastrevert-order-test--lines-child)
                               ((< kind 80) #'fastrevert-order-test--bytes-child)
                               (t #'fastrevert-order-test--cat-child))
                         label)))
    ;; Some filters never wait, some always do (as one that reads the
    ;; reply to what it has just sent), most now and then.
    (setf (fastrevert-order-test--child-waits child)
          (pcase (fastrevert-order-test--random 4) (0 0) (1 100) (_ 40))
          ;; A slow filter keeps the main thread from waiting, and the
          ;; engine then adopts the children that wait to be served.
          (fastrevert-order-test--child-work child)
          (if (fastrevert-order-test--chance 25) (fastrevert-order-test--between 1 4) 0))
    child))

(defun fastrevert-order-test--compute (milliseconds)
  "Keep the main thread busy for MILLISECONDS, as a slow filter does."
  (let ((until (+ (float-time) (/ milliseconds 1000.0))))
    (while (< (float-time) until))))

;;;; A round

(defvar fastrevert-order-test--depth 0
  "How many filters of the round are waiting, one inside the other.")

(defvar fastrevert-order-test--deepest 0
  "The deepest `fastrevert-order-test--depth' any filter waited at.")

(defvar fastrevert-order-test--late-starts 0
  "How many children were started while another child's filter waited.")

(defvar fastrevert-order-test--large-chunks 0
  "How many filter calls got 64 KiB or more at once.
A stream that keeps coming is read in throughput mode, which hands
its filter the output of many reads in one string.")

(defvar fastrevert-order-test--fresh-engines 0
  "How many rounds started with an engine started anew.")

(defconst fastrevert-order-test--max-depth 3
  "How many filters may wait one inside the other.")

(defun fastrevert-order-test--fault (child format-string &rest args)
  "Note a fault of CHILD, described by FORMAT-STRING and ARGS."
  (push (apply #'format format-string args) (fastrevert-order-test--child-faults child)))

(defun fastrevert-order-test--send-some (child)
  "Send CHILD its next piece of input; close its input after the last."
  (let ((process (fastrevert-order-test--child-process child))
        (piece (pop (fastrevert-order-test--child-input child))))
    (when (and process piece)
      (setf (fastrevert-order-test--child-expected child)
            (concat (fastrevert-order-test--child-expected child) piece))
      (fastrevert-process-send-string process piece)
      (unless (fastrevert-order-test--child-input child)
        (fastrevert-process-send-eof process)))))

(cl-defstruct (fastrevert-order-test--round
               (:constructor fastrevert-order-test--round-create)
               (:copier nil))
  "The children of a round."
  (pending nil :documentation "The children still to start, in order.")
  (started nil :documentation "The children started, newest first."))

(defun fastrevert-order-test--start (child round)
  "Start CHILD, a child of ROUND, and note it in ROUND."
  (let ((process
         (fastrevert-make-process
          :name (fastrevert-order-test--child-label child)
          :command (fastrevert-order-test--child-command child)
          :coding 'binary :noquery t
          :filter (lambda (_process string)
                    (fastrevert-order-test--filter child string round))
          :sentinel (lambda (_process event)
                      (when (fastrevert-order-test--child-in-filter child)
                        (fastrevert-order-test--fault child "sentinel called in its filter"))
                      (push event (fastrevert-order-test--child-events child))))))
    (setf (fastrevert-order-test--child-process child) process)
    (push child (fastrevert-order-test--round-started round))
    ;; A child fed on stdin gets its first piece at once or later.
    (when (and (fastrevert-order-test--child-input child)
               (fastrevert-order-test--chance 50))
      (fastrevert-order-test--send-some child))))

(defun fastrevert-order-test--some-child (round)
  "Return a started child of ROUND, drawn from the generator, or nil."
  (let ((started (fastrevert-order-test--round-started round)))
    (and started (nth (fastrevert-order-test--random (length started)) started))))

(defun fastrevert-order-test--filter (child string round)
  "The filter of CHILD, a child of ROUND, which got STRING.
It keeps STRING, notes a call while it runs or after the sentinel,
and, as the generator says, starts a child still to start, feeds a
child's input, and waits for more output."
  (when (fastrevert-order-test--child-in-filter child)
    (fastrevert-order-test--fault child "filter called while it runs"))
  (when (fastrevert-order-test--child-events child)
    (fastrevert-order-test--fault child "output after the sentinel"))
  (unless (and (stringp string) (not (multibyte-string-p string)))
    (fastrevert-order-test--fault child "filter got %S, not a unibyte string" (type-of string)))
  (push string (fastrevert-order-test--child-chunks child))
  (when (>= (length string) 65536)
    (setq fastrevert-order-test--large-chunks (1+ fastrevert-order-test--large-chunks)))
  (setf (fastrevert-order-test--child-in-filter child) t)
  (unwind-protect
      (progn
        (fastrevert-order-test--compute (fastrevert-order-test--child-work child))
        (when (and (fastrevert-order-test--round-pending round)
                   (fastrevert-order-test--chance 30))
          (let ((late (pop (fastrevert-order-test--round-pending round))))
            (fastrevert-order-test--start late round)
            ;; The filters this one runs inside of are waiting.
            (when (> fastrevert-order-test--depth 0)
              (setq fastrevert-order-test--late-starts
                    (1+ fastrevert-order-test--late-starts)))))
        (when (fastrevert-order-test--chance 20)
          (let ((fed (fastrevert-order-test--some-child round)))
            (when (and fed (fastrevert-order-test--child-input fed))
              (fastrevert-order-test--send-some fed))))
        (when (and (< fastrevert-order-test--depth fastrevert-order-test--max-depth)
                   (fastrevert-order-test--chance (fastrevert-order-test--child-waits child)))
          (let ((fastrevert-order-test--depth (1+ fastrevert-order-test--depth))
                (target (pcase (fastrevert-order-test--random 3)
                          (0 nil)
                          (1 (fastrevert-order-test--child-process child))
                          (_ (let ((other (fastrevert-order-test--some-child round)))
                               (and other (fastrevert-order-test--child-process other)))))))
            (setq fastrevert-order-test--deepest
                  (max fastrevert-order-test--deepest fastrevert-order-test--depth))
            (fastrevert-accept-process-output
             target (/ (fastrevert-order-test--between 1 15) 1000.0)))))
    (setf (fastrevert-order-test--child-in-filter child) nil)))

(defun fastrevert-order-test--difference (got expected)
  "Describe how GOT differs from EXPECTED, two unibyte strings."
  (let* ((at (let ((compared (compare-strings got nil nil expected nil nil)))
               (if (eq compared t) nil (1- (abs compared)))))
         (from (max 0 (- (or at 0) 8))))
    (format "%d bytes, %d expected, first difference at byte %s: got %S, expected %S"
            (length got) (length expected) at
            (substring got (min from (length got)) (min (length got) (+ from 40)))
            (substring expected (min from (length expected))
                       (min (length expected) (+ from 40))))))

(defun fastrevert-order-test--round (seed round-number fresh-percent)
  "Run round ROUND-NUMBER of the run with SEED; return nil or what failed.
The first round, and FRESH-PERCENT of the others, start with an engine
started anew, whose very first child is then the round's first."
  (fastrevert-order-test--reseed (+ (* seed 7919) round-number))
  (when (or (zerop round-number) (fastrevert-order-test--chance fresh-percent))
    (fastrevert--engine-stop)
    (setq fastrevert-order-test--fresh-engines (1+ fastrevert-order-test--fresh-engines)))
  (let* ((count (fastrevert-order-test--between 2 7))
         (children (cl-loop for i below count
                            collect (fastrevert-order-test--make-child
                                     (format "r%d.%d" round-number i))))
         (at-once (fastrevert-order-test--between 1 (1- count)))
         (round (fastrevert-order-test--round-create :pending (nthcdr at-once children)))
         (deadline (+ (float-time) 60))
         (ended (lambda ()
                  (cl-every #'fastrevert-order-test--child-events children))))
    (dolist (child (cl-subseq children 0 at-once))
      (fastrevert-order-test--start child round))
    (while (and (not (funcall ended)) (< (float-time) deadline))
      ;; Children nobody's filter started yet start now and then.
      (when (and (fastrevert-order-test--round-pending round)
                 (fastrevert-order-test--chance 20))
        (fastrevert-order-test--start (pop (fastrevert-order-test--round-pending round)) round))
      (let ((fed (fastrevert-order-test--some-child round)))
        (when (and fed (fastrevert-order-test--child-input fed)
                   (fastrevert-order-test--chance 80))
          (fastrevert-order-test--send-some fed)))
      (pcase (fastrevert-order-test--random 4)
        (0 (accept-process-output nil 0.005))
        (1 (fastrevert-accept-process-output nil 0.02))
        (_ (let ((child (fastrevert-order-test--some-child round)))
             (fastrevert-accept-process-output
              (and child (fastrevert-order-test--child-process child)) 0.02)))))
    (let ((failures nil))
      (dolist (child children)
        (let ((label (fastrevert-order-test--child-label child))
              (got (apply #'concat (reverse (fastrevert-order-test--child-chunks child))))
              (expected (fastrevert-order-test--child-expected child)))
          (dolist (fault (reverse (fastrevert-order-test--child-faults child)))
            (push (format "%s: %s" label fault) failures))
          (cond ((not (fastrevert-order-test--child-events child))
                 (push (format "%s: no sentinel call within 60 s (%s)" label
                               (fastrevert-order-test--difference got expected))
                       failures))
                ((not (equal (fastrevert-order-test--child-events child) '("finished\n")))
                 (push (format "%s: sentinel events %S" label
                               (fastrevert-order-test--child-events child))
                       failures)))
          (unless (string= got expected)
            (push (format "%s: %s" label (fastrevert-order-test--difference got expected))
                  failures))))
      ;; What a failed round left running goes before the next round.
      (dolist (child children)
        (let ((process (fastrevert-order-test--child-process child)))
          (when (and process (fastrevert-process-live-p process))
            (fastrevert-delete-process process))))
      (nreverse failures))))

(defun fastrevert-order-test--run (rounds fresh-percent)
  "Run ROUNDS rounds, FRESH-PERCENT of them on an engine started anew.
Fail at the first round whose streams are not what the children
wrote, naming the seed and the round."
  (fastrevert-test-with-temp-dir dir
    (setq fastrevert-order-test--binary (expand-file-name "bytes" dir))
    (fastrevert-order-test--reseed fastrevert-order-test--seed)
    (setq fastrevert-order-test--binary-bytes (fastrevert-order-test--bytes (* 512 1024)))
    (let ((coding-system-for-write 'binary))
      (write-region fastrevert-order-test--binary-bytes nil fastrevert-order-test--binary
                    nil 'silent))
    (dotimes (round-number rounds)
      (let* ((fresh-before fastrevert-order-test--fresh-engines)
             (failures (fastrevert-order-test--round
                        fastrevert-order-test--seed round-number fresh-percent)))
        (when failures
          (ert-fail (format "FASTREVERT_TEST_SEED=%d, round %d%s:\n%s"
                            fastrevert-order-test--seed round-number
                            (if (> fastrevert-order-test--fresh-engines fresh-before)
                                " (on a fresh engine)"
                              "")
                            (mapconcat #'identity failures "\n"))))))))

(ert-deftest fastrevert-process-order-every-stream-arrives-whole-and-in-order-under-nesting ()
  "Hundreds of seeded rounds of children, waiting filters and fresh engines.
Every stream reaches its filter byte for byte, in pieces of a few
bytes and, in throughput mode, of 64 KiB and more; no filter runs
inside itself; every sentinel comes once, after all output."
  (setq fastrevert-order-test--deepest 0
        fastrevert-order-test--late-starts 0
        fastrevert-order-test--large-chunks 0
        fastrevert-order-test--fresh-engines 0)
  (fastrevert-order-test--run 160 15)
  ;; The rounds did what they are for.
  (should (= fastrevert-order-test--deepest fastrevert-order-test--max-depth))
  (should (> fastrevert-order-test--late-starts 0))
  (should (> fastrevert-order-test--large-chunks 0))
  (should (> fastrevert-order-test--fresh-engines 1)))

(provide 'fastrevert-process-order-test)

;;; fastrevert-process-order-test.el ends here
