;;; fastrevert-call-process-quit-test.el --- What a C-g keeps of call-process output -*- lexical-binding: t; -*-

;;; Commentary:

;; Property tests of `fastrevert-call-process' under a real quit: a terminal
;; Emacs runs the call, and the quit key is typed on its terminal.  A child
;; (the tests' writer program) prints a seeded stream of ASCII and UTF-8 at
;; a seeded pace, and creates a marker file once it has written a seeded
;; number of bytes; the quit comes then.  Each test forces one of the paths
;; output takes, by its size, pace and coding, over many rounds in one
;; terminal Emacs.  After each quit, the buffer holds a prefix of the stream
;; and at least every byte the child wrote before the quit, less an
;; unfinished character, and the child is gone.
;;
;; FASTREVERT_TEST_SEED sets the seed of the rounds' choices and streams;
;; FASTREVERT_QUIT_ROUNDS the rounds per test (50).  A failure names the
;; seed and the round.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'fastrevert-test-helpers)

(defvar fastrevert-call-process-quit-test--writer
  (or (getenv "FASTREVERT_TEST_WRITER")
      (error "FASTREVERT_TEST_WRITER names no writer program (ctest sets it)"))
  "The program that prints a seeded stream at a chosen pace.")

(defun fastrevert-call-process-quit-test--seed ()
  "Return the seed of this run: FASTREVERT_TEST_SEED, else a random one."
  (let ((given (getenv "FASTREVERT_TEST_SEED")))
    (if given (string-to-number given) (random 1000000000))))

(defun fastrevert-call-process-quit-test--rounds ()
  "Return the rounds per test: FASTREVERT_QUIT_ROUNDS, else 50."
  (max 1 (string-to-number (or (getenv "FASTREVERT_QUIT_ROUNDS") "50"))))

(defun fastrevert-call-process-quit-test--stream (seed length)
  "Return the writer's stream for SEED and LENGTH, as a unibyte string."
  (with-temp-buffer
    (set-buffer-multibyte nil)
    (let ((coding-system-for-read 'binary))
      (should (eql 0 (call-process fastrevert-call-process-quit-test--writer nil t nil
                                   "dump" (number-to-string seed) (number-to-string length)))))
    (buffer-string)))

(defun fastrevert-call-process-quit-test--least-kept (stream n rule)
  "Return the least a quit keeps of the first N bytes of STREAM.
RULE is `utf-8' (N less an unfinished character), `bytes' (all N)
or `ascii' (up to the last byte below 0x80 that is neither a digit
nor a CR)."
  (setq n (min n (length stream)))
  (pcase rule
    ('bytes n)
    ('utf-8
     ;; A character starts at any byte that does not continue one.
     (while (and (> n 0) (< n (length stream)) (= (logand (aref stream n) #xC0) #x80))
       (setq n (1- n)))
     n)
    (_
     (while (and (> n 0)
                 (let ((byte (aref stream (1- n))))
                   (or (>= byte #x80) (= byte ?\r) (<= ?0 byte ?9))))
       (setq n (1- n)))
     n)))

(defun fastrevert-call-process-quit-test--sized (low high)
  "Return a random size in [LOW, HIGH], as likely in each power of two."
  (let* ((low-bits (logb (max 1 low)))
         (high-bits (logb high))
         (bits (+ low-bits (random (1+ (- high-bits low-bits)))))
         (top (ash 1 (1+ bits))))
    (min high (max low (+ (/ top 2) (random (/ top 2)))))))

(defun fastrevert-call-process-quit-test--plan (seed rounds spec)
  "Return ROUNDS rounds drawn from SEED for SPEC.
SPEC is a plist: :min and :max the stream's length, :paces the paces
to choose from, :close non-nil for a child that closes its output
before the quit, :quit-from the least number of bytes written before
the quit, :coding the coding system to decode with.  Each round
is (INDEX SEED LENGTH PACE QUIT-AT CLOSE CODING DESTINATION), where
DESTINATION is SPEC's :destination: `buffer' (the current buffer, the
default), `name' (a buffer given by name), `stderr' (the current buffer,
with standard error to a file of its own) or `file' ((:file FILE))."
  (random (format "fastrevert-quit-%d-%S" seed (plist-get spec :paces)))
  (cl-loop for index below rounds
           for length = (fastrevert-call-process-quit-test--sized
                         (plist-get spec :min) (plist-get spec :max))
           for paces = (plist-get spec :paces)
           collect (list index (+ seed index) length (nth (random (length paces)) paces)
                         ;; Past the end, the child marks once it has closed its output.
                         (cond ((plist-get spec :close) (1+ (* 2 length)))
                               ((plist-get spec :quit-from)
                                (let ((from (min length (plist-get spec :quit-from))))
                                  (+ from (random (1+ (- length from))))))
                               (t (random (1+ length))))
                         (plist-get spec :close) (plist-get spec :coding)
                         (or (plist-get spec :destination) 'buffer))))

(defun fastrevert-call-process-quit-test--form (dir plan)
  "Return the form a terminal Emacs runs for PLAN, with its files in DIR.
For each round it calls the writer into a fresh buffer, catches the
quit, and writes what reached the destination (a buffer encoded in
UTF-8, or the file's bytes) to out-INDEX, then
\(OUTCOME GONE) to result-INDEX: OUTCOME is `quit' or `finished', GONE
whether the child has left the process table."
  `(progn
     (require 'fastrevert-call)
     (prefer-coding-system 'utf-8)
     (dolist (round ',plan)
       (pcase-let ((`(,index ,seed ,length ,pace ,quit-at ,close ,coding ,destination) round))
         (let ((marker (expand-file-name (format "marker-%d" index) ,dir))
               (out (expand-file-name (format "out-%d" index) ,dir))
               (named "fastrevert quit target"))
           (with-temp-buffer
             (let ((outcome
                    (condition-case nil
                        (let ((coding-system-for-read coding))
                          (apply #'fastrevert-call-process ,fastrevert-call-process-quit-test--writer
                                 nil (pcase destination
                                       ('buffer t)
                                       ('name named)
                                       ('stderr (list t (concat out ".stderr")))
                                       ('file (list :file out)))
                                 nil "write" (number-to-string seed)
                                 (number-to-string length) pace (number-to-string quit-at)
                                 marker (and close '("close")))
                          'finished)
                      (quit 'quit)))
                   (pid (with-temp-buffer
                          (insert-file-contents marker)
                          (string-to-number (buffer-string)))))
               (unless (eq destination 'file)
                 (with-current-buffer (if (eq destination 'name) named (current-buffer))
                   (let ((coding-system-for-write 'utf-8-unix))
                     (write-region nil nil out nil 'silent))
                   (when (eq destination 'name) (kill-buffer))))
               ;; The result appears whole, under its name at last.
               (let ((result (expand-file-name (format "result-%d" index) ,dir)))
                 (with-temp-file (concat result ".new")
                   (prin1 (list outcome (not (file-exists-p (format "/proc/%d" pid))))
                          (current-buffer)))
                 (rename-file (concat result ".new") result)))))))
     (kill-emacs 0)))

(defun fastrevert-call-process-quit-test--run (spec)
  "Run the rounds of SPEC in a terminal Emacs, quitting each once marked.
SPEC is as for `fastrevert-call-process-quit-test--plan', plus :rule,
the cut rule the destination makes (`utf-8', `ascii' or `bytes')."
  (let* ((seed (fastrevert-call-process-quit-test--seed))
         (plan (fastrevert-call-process-quit-test--plan
                seed (fastrevert-call-process-quit-test--rounds) spec)))
    ;; Missing, it would fail in the terminal Emacs, where nothing shows.
    (should (file-executable-p fastrevert-call-process-quit-test--writer))
    (fastrevert-test-with-temp-dir dir
      (let* ((process-environment (cons "TERM=xterm" (fastrevert-test-emacs-environment)))
             (emacs (make-process
                     :name "fastrevert-tty-emacs"
                     :buffer nil
                     :connection-type 'pty
                     :noquery t
                     :command (list (expand-file-name invocation-name invocation-directory)
                                    "-Q" "-nw" "-L" fastrevert-test-lisp-directory
                                    "--eval" (prin1-to-string
                                              (fastrevert-call-process-quit-test--form
                                               dir plan))))))
        (unwind-protect
            (progn
              (set-process-window-size emacs 24 80)
              (dolist (round plan)
                (pcase-let* ((`(,index ,round-seed ,length ,pace ,quit-at ,_close ,coding ,_to)
                              round)
                             (file (lambda (name) (expand-file-name
                                                   (format "%s-%d" name index) dir))))
                  (ert-info ((format "seed %d, round %d: stream seed %d, %d bytes at pace %s, quit after %d, coding %s"
                                     seed index round-seed length pace quit-at coding))
                    (should (fastrevert-test-wait-for
                             (lambda () (file-exists-p (funcall file "marker"))) 60))
                    (process-send-string emacs "\C-g")
                    (should (fastrevert-test-wait-for
                             (lambda () (file-exists-p (funcall file "result"))) 60))
                    (let* ((result (with-temp-buffer
                                     (insert-file-contents (funcall file "result"))
                                     (read (current-buffer))))
                           (kept (with-temp-buffer
                                   (set-buffer-multibyte nil)
                                   (insert-file-contents-literally (funcall file "out"))
                                   (buffer-string)))
                           (stream (fastrevert-call-process-quit-test--stream
                                    round-seed length))
                           (least (fastrevert-call-process-quit-test--least-kept
                                   stream quit-at (plist-get spec :rule))))
                      (should (eq (nth 0 result) 'quit))
                      ;; The child is reaped.
                      (should (nth 1 result))
                      (should (string-prefix-p kept stream))
                      (should (>= (length kept) least)))))))
          (delete-process emacs))))))

(ert-deftest fastrevert-call-process-quit-keeps-a-string-worth-of-output ()
  "Output within a string's worth, from a child that stalls."
  (fastrevert-call-process-quit-test--run
   '(:min 1 :max 16384 :paces ("stall" "trickle") :coding utf-8 :rule utf-8)))

(ert-deftest fastrevert-call-process-quit-keeps-a-closed-pipe-read-by-emacs ()
  "Output that waits in a pipe its child closed, read straight by Emacs."
  (fastrevert-call-process-quit-test--run
   '(:min 16385 :max 60000 :paces ("flood") :close t :coding utf-8 :rule utf-8)))

(ert-deftest fastrevert-call-process-quit-keeps-memfd-ranges ()
  "Output streamed through memfd ranges, at every pace."
  (fastrevert-call-process-quit-test--run
   '(:min 16384 :max 2097152 :paces ("flood" "trickle" "stall" "mixed")
     :coding utf-8 :rule utf-8)))

(ert-deftest fastrevert-call-process-quit-keeps-what-the-copy-thread-read ()
  "Output past the copy thread's threshold, from a child that floods.
The quit comes after 4.3 MB, past the 4 MiB at which a child that
outpaces Emacs gets a thread of its own to drain its pipe."
  (fastrevert-call-process-quit-test--run
   '(:min 4500000 :max 6000000 :quit-from 4300000 :paces ("flood") :coding utf-8
     :rule utf-8)))

(ert-deftest fastrevert-call-process-quit-keeps-output-that-cannot-be-cut ()
  "Output decoded with `undecided', which is inserted whole."
  (fastrevert-call-process-quit-test--run
   '(:min 1024 :max 2097152 :paces ("flood" "trickle" "stall" "mixed")
     :coding undecided :rule ascii)))

(ert-deftest fastrevert-call-process-quit-keeps-output-into-a-buffer-given-by-name ()
  "Output into a buffer named by a string."
  (fastrevert-call-process-quit-test--run
   '(:min 1024 :max 1048576 :paces ("flood" "stall" "mixed") :coding utf-8 :rule utf-8
     :destination name)))

(ert-deftest fastrevert-call-process-quit-keeps-output-with-stderr-to-a-file ()
  "Output into a buffer while standard error goes to a file of its own."
  (fastrevert-call-process-quit-test--run
   '(:min 1024 :max 1048576 :paces ("flood" "stall" "mixed") :coding utf-8 :rule utf-8
     :destination stderr)))

(ert-deftest fastrevert-call-process-quit-keeps-output-into-a-file ()
  "Output that the child writes straight into a (:file FILE) destination."
  (fastrevert-call-process-quit-test--run
   '(:min 1024 :max 1048576 :paces ("flood" "stall" "mixed") :coding utf-8 :rule bytes
     :destination file)))

(provide 'fastrevert-call-process-quit-test)

;;; fastrevert-call-process-quit-test.el ends here
