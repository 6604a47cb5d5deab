;;; fastrevert-robust-test.el --- Hostile use of fastrevert: nothing crashes, nothing is lost -*- lexical-binding: t; -*-

;;; Commentary:

;; Every native primitive and every public function called as a hostile
;; user would: wrong types, infinities, NaN, huge and negative numbers,
;; killed buffers, dead processes.  And the lifecycle abuse that once
;; crashed Emacs, lost output or silently stopped auto-revert: an
;; enormous `read-process-output-max', an engine stopped inside a drain,
;; filters that wait for their own output, a stat that never returns at
;; exit, every process deleted at once, invalid coding systems, and
;; unloading the library.  What could kill Emacs runs in a separate batch
;; Emacs, so that a crash fails the test instead of ending the suite.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'fastrevert)
(require 'fastrevert-process)

(declare-function fastrevert--mod-test-watch-fault "fastrevert-module" (kind value))
(declare-function fastrevert--mod-test-delayed-stats "fastrevert-module" ())
(declare-function fastrevert--mod-echo "fastrevert-module" (token string))
(declare-function fastrevert--mod-test-throw "fastrevert-module" (kind))
(declare-function fastrevert--mod-hold-wakes "fastrevert-module" (hold))
(declare-function fastrevert--mod-set-wake-process "fastrevert-module" (pipe-process))

;;;; Helpers

(defun fastrevert-robust-test--emacs (form &optional timeout)
  "Run FORM in a new batch Emacs that loads fastrevert; return (CODE . OUTPUT).
CODE is the exit code, or the symbol `timeout' when it ran longer than
TIMEOUT seconds (default 60) and was killed.  OUTPUT is what it printed."
  (let* ((output (generate-new-buffer " *fastrevert-robust-emacs*"))
         (process-environment (fastrevert-test-emacs-environment))
         (process
          (make-process
           :name "fastrevert-robust-emacs" :buffer output :noquery t
           :connection-type 'pipe
           :command (list (expand-file-name invocation-name invocation-directory)
                          "-Q" "--batch"
                          "-L" fastrevert-test-lisp-directory
                          "--eval" "(setq load-prefer-newer t)"
                          "--eval" (prin1-to-string `(progn (require 'fastrevert) ,form)))
           :sentinel #'ignore)))
    (unwind-protect
        (if (fastrevert-test-wait-for (lambda () (not (process-live-p process))) (or timeout 60))
            (progn
              ;; The last output may still be on its way.
              (while (accept-process-output process 0.05))
              (cons (process-exit-status process)
                    (with-current-buffer output (buffer-string))))
          (cons 'timeout (with-current-buffer output (buffer-string))))
      (delete-process process)
      (kill-buffer output))))

(defun fastrevert-robust-test--run (&rest args)
  "Start a fastrevert process with ARGS; collect its output and events.
Return a plist (:process P :output O :events E) whose lists grow in
place, newest first."
  (let ((state (list :process nil :output nil :events nil)))
    (plist-put state :process
               (apply #'fastrevert-make-process
                      (append args
                              (unless (plist-member args :filter)
                                (list :filter (lambda (_process text)
                                                (plist-put state :output
                                                           (cons text (plist-get state :output))))))
                              (list :sentinel (lambda (_process event)
                                                (plist-put state :events
                                                           (cons event (plist-get state :events))))
                                    :noquery t))))
    state))

(defun fastrevert-robust-test--output (state)
  "Return all the output STATE collected, in order."
  (apply #'concat (reverse (plist-get state :output))))

(defun fastrevert-robust-test--finish (state &optional timeout)
  "Wait up to TIMEOUT seconds (default 30) for the process of STATE to end."
  (should (fastrevert-test-wait-for (lambda () (plist-get state :events)) (or timeout 30)))
  state)

(defun fastrevert-robust-test--counting-lines (count)
  "Return a shell command printing the numbers below COUNT, one write each."
  (format "i=0; while [ $i -lt %d ]; do echo $i; i=$((i+1)); done" count))

(defun fastrevert-robust-test--numbers (from below)
  "Return the lines the numbers FROM to BELOW (excluded) make."
  (mapconcat (lambda (i) (format "%d\n" i)) (number-sequence from (1- below)) ""))

;;;; Every primitive, called with hostile arguments

(defun fastrevert-robust-test--hostile-values ()
  "Return values no primitive expects, of every kind."
  (let ((killed (generate-new-buffer " *fastrevert-robust-killed*"))
        (dead (make-process :name "fastrevert-robust-dead" :command '("true") :noquery t
                            :buffer nil)))
    (kill-buffer killed)
    (while (process-live-p dead) (accept-process-output dead 0.01))
    (list nil t 0 -1 1 most-positive-fixnum most-negative-fixnum (expt 2 70) (- (expt 2 70))
          1.0e+INF -1.0e+INF 0.0e+NaN 0.5 -0.5 "" "x" (make-string 5000 ?a) "a\0b"
          (string-to-unibyte "\377\376") 'foo :keyword [] [1 2] ["a" 3] '(1 2) '("a" . "b")
          (make-marker) (make-hash-table) (make-bool-vector 3 t) killed (current-buffer)
          #'ignore (lambda (&rest _) (error "Hostile handler")) dead)))

(defvar fastrevert-robust-test--next-id 900000
  "Ids for the processes and watches the hostile calls make.")

(defun fastrevert-robust-test--next-id ()
  "Return a fresh id for a hostile call."
  (setq fastrevert-robust-test--next-id (1+ fastrevert-robust-test--next-id)))

(defvar fastrevert-robust-test--pipes nil
  "The directory of the named pipes the hostile calls make, or nil.")

(defun fastrevert-robust-test--valid-arguments (primitive)
  "Return arguments PRIMITIVE accepts, to make hostile one at a time.
Return `separate' for a primitive tested on its own below."
  (pcase primitive
    ('fastrevert--mod-accessible-directory-p (list "/tmp"))
    ('fastrevert--mod-call-process (list "/bin/true" ["true"] nil "/tmp" nil nil nil 0 nil))
    ('fastrevert--mod-drain (list #'ignore))
    ('fastrevert--mod-echo (list 1 "x"))
    ('fastrevert--mod-first-executable (list "/bin/true\0"))
    ('fastrevert--mod-process-backlog (list (fastrevert-robust-test--next-id)))
    ('fastrevert--mod-process-eof (list (fastrevert-robust-test--next-id)))
    ('fastrevert--mod-process-ended (list (fastrevert-robust-test--next-id)))
    ('fastrevert--mod-process-attach
     (let ((id (fastrevert-robust-test--next-id)))
       (unless fastrevert-robust-test--pipes
         (setq fastrevert-robust-test--pipes (make-temp-file "fastrevert-robust-pipes" t)))
       (list id (make-temp-file (expand-file-name "p" fastrevert-robust-test--pipes) t) 'lsp
             (fastrevert--process-start-record id "robust" '("x") nil nil nil nil nil nil
                                               'binary 'binary nil fastrevert--engine-generation)
             nil '(plist nil :json-false) 262144)))
    ('fastrevert--mod-lisp-file (list (fastrevert-robust-test--next-id) 1))
    ('fastrevert--mod-lisp-file-done (list (fastrevert-robust-test--next-id) 1))
    ('fastrevert--mod-json-to-lisp (list "{\"a\":[1,2.5,null,false]}" '(hash-table nil nil)))
    ('fastrevert--mod-process-remove (list (fastrevert-robust-test--next-id)))
    ('fastrevert--mod-process-send (list (fastrevert-robust-test--next-id) "x"))
    ('fastrevert--mod-process-signal (list (fastrevert-robust-test--next-id) 0))
    ('fastrevert--mod-process-start
     (list (fastrevert-robust-test--next-id) "/bin/true" ["true"] nil "/tmp" nil t t nil 4096
           nil 'raw nil))
    ('fastrevert--mod-set-wake-process (list fastrevert--wake-process))
    ('fastrevert--mod-signal-number (list "INT"))
    ('fastrevert--mod-strerror (list 'ENOENT))
    ('fastrevert--mod-strsignal (list 2))
    ('fastrevert--mod-test-watch-fault (list 'overflow 0))
    ('fastrevert--mod-watch-add (list (fastrevert-robust-test--next-id) "/tmp/fastrevert-robust" 'poll))
    ('fastrevert--mod-watch-configure (list 5 0.03 nil))
    ('fastrevert--mod-watch-hold-limit (list fastrevert-vc-hold-limit))
    ('fastrevert--mod-watch-remove (list (fastrevert-robust-test--next-id)))
    ('fastrevert--mod-watch-vc-info (list nil))
    ('fastrevert--mod-watch-visible (list (list 1 2)))
    ((or 'fastrevert--mod-running-p 'fastrevert--mod-stats 'fastrevert--mod-test-delayed-stats
         'fastrevert--mod-version 'fastrevert--mod-module-api 'fastrevert--mod-watch-backend)
     nil)
    ;; Each of these is tested on its own: they start, stop, block, hold
    ;; the engine's wakes or throw by design.
    ((or 'fastrevert--mod-start 'fastrevert--mod-stop 'fastrevert--mod-wait
         'fastrevert--mod-wait-drain 'fastrevert--mod-hold-wakes 'fastrevert--mod-test-throw)
     'separate)
    (_ 'unknown)))

(defun fastrevert-robust-test--hostile-calls ()
  "Call each primitive with each of its arguments made hostile in turn.
Return (CALLS . PROBLEMS): how many calls were made, and the calls
that neither returned nor signalled a clear error, nor left the engine
sound, as (PRIMITIVE ARGUMENTS OUTCOME)."
  (fastrevert--engine-ensure)
  (let ((hostile (fastrevert-robust-test--hostile-values))
        (calls 0)
        (problems nil))
    (unwind-protect
        (dolist (primitive (apropos-internal "\\`fastrevert--mod-" #'fboundp))
          (let ((valid (fastrevert-robust-test--valid-arguments primitive)))
            (cond
             ;; A primitive this test does not know is a problem until added.
             ((eq valid 'unknown) (push (list primitive nil 'unknown) problems))
             ((eq valid 'separate))
             (t
              (dotimes (position (length valid))
                (dolist (value hostile)
                  (let ((arguments (copy-sequence
                                    (fastrevert-robust-test--valid-arguments primitive))))
                    (setf (nth position arguments) value)
                    (setq calls (1+ calls))
                    (condition-case error
                        (apply primitive arguments)
                      ((wrong-type-argument args-out-of-range overflow-error fastrevert-error))
                      (error
                       ;; Only the hostile handler's own error gets through.
                       (unless (equal error '(error "Hostile handler"))
                         (push (list primitive arguments error) problems))))
                    (fastrevert--mod-test-watch-fault 'stat-delay-ms 0))))))))
      (when fastrevert-robust-test--pipes
        (delete-directory fastrevert-robust-test--pipes t)
        (setq fastrevert-robust-test--pipes nil))
      (fastrevert--mod-test-watch-fault 'add-watch-errno 0)
      (fastrevert--mod-test-watch-fault 'init-errno 0)
      (fastrevert--mod-test-watch-fault 'stat-delay-ms 0)
      (fastrevert--configure-engine))
    ;; The engine is sound after it all.
    (let* ((echoed nil)
           (fastrevert--record-handlers (cons (cons 'echo (lambda (id _code data)
                                                            (when (eql id 77) (setq echoed data))))
                                              fastrevert--record-handlers)))
      (fastrevert--mod-echo 77 "still here")
      (unless (and (fastrevert--engine-live-p)
                   (fastrevert-test-wait-for (lambda () echoed) 30)
                   (equal echoed "still here"))
        (push (list 'engine nil 'unsound) problems)))
    (cons calls problems)))

(ert-deftest fastrevert-robust-every-primitive-refuses-hostile-arguments-cleanly ()
  "Each argument of each primitive, made hostile in turn: a clear error or a result.
The calls run in another Emacs, in a directory of its own: a crash
fails the test, and the files that hostile names create go nowhere."
  (fastrevert-test-with-temp-dir dir
    (let* ((default-directory dir)
           (result (fastrevert-robust-test--emacs
                    `(progn
                       (add-to-list 'load-path
                                    ,(file-name-directory (locate-library "fastrevert-robust-test")))
                       (require 'fastrevert-robust-test)
                       (let ((print-escape-newlines t)
                             (print-length 20)
                             (print-level 4))
                         (prin1 (fastrevert-robust-test--hostile-calls))
                         (terpri)))
                    120)))
      (should (eql (car result) 0))
      (let ((outcome (car (read-from-string
                           (substring (cdr result) (string-match "^(" (cdr result)))))))
        (should (> (car outcome) 1000))
        (should (equal (cdr outcome) nil))))))

(ert-deftest fastrevert-robust-engine-lifecycle-primitives-refuse-hostile-arguments ()
  (fastrevert--engine-ensure)
  (dolist (value (fastrevert-robust-test--hostile-values))
    (ert-info ((format "%S" value))
      ;; Starting a second engine, or on something that is not a live
      ;; pipe process, is refused.
      (should-error (fastrevert--mod-start value) :type '(wrong-type-argument fastrevert-error))
      (should-error (fastrevert--mod-set-wake-process value) :type 'wrong-type-argument)
      (should (fastrevert--engine-live-p))))
  ;; Holding and releasing wakes with any value leaves none held.
  (dolist (value (fastrevert-robust-test--hostile-values))
    (fastrevert--mod-hold-wakes value)
    (fastrevert--mod-hold-wakes nil))
  (dotimes (_ 50) (fastrevert--mod-hold-wakes nil))
  (let* ((echoed nil)
         (fastrevert--record-handlers (cons (cons 'echo (lambda (_id _code data) (setq echoed data)))
                                            fastrevert--record-handlers)))
    (fastrevert--mod-echo 78 "woken")
    ;; Only the wake pipe, read by Emacs, can deliver it here.
    (should (fastrevert-test-wait-for (lambda () echoed)))))

(ert-deftest fastrevert-robust-public-functions-treat-dead-and-killed-things-as-stock ()
  (let* ((killed (let ((buffer (generate-new-buffer " *fastrevert-robust-killed*")))
                   (kill-buffer buffer)
                   buffer))
         (stock-dead (make-process :name "dead" :command '("true") :noquery t :buffer nil))
         (dead (plist-get (fastrevert-robust-test--finish
                           (fastrevert-robust-test--run :name "dead" :command '("true")))
                          :process))
         (outcome (lambda (function)
                    (condition-case error
                        (let ((value (funcall function)))
                          (cond ((processp value) (delete-process value) 'process)
                                ((fastrevert-process-p value)
                                 (fastrevert-delete-process value) 'process)
                                (t value)))
                      (error error)))))
    (should (fastrevert-test-wait-for (lambda () (not (process-live-p stock-dead)))))
    (pcase-dolist (`(,stock . ,ours)
                   `(((make-process :name "k" :command '("true") :buffer ,killed :noquery t)
                      . (fastrevert-make-process :name "k" :command '("true") :buffer ,killed
                                                 :noquery t))
                     ((make-process :name "k" :command '("true") :stderr ,killed :noquery t)
                      . (fastrevert-make-process :name "k" :command '("true") :stderr ,killed
                                                 :noquery t))
                     ((call-process "true" nil ,killed) . (fastrevert-call-process "true" nil ,killed))
                     ((call-process "true" nil (list t ,killed))
                      . (fastrevert-call-process "true" nil (list t ,killed)))
                     ((process-send-string ,stock-dead "x") . (fastrevert-process-send-string ,dead "x"))
                     ((process-send-eof ,stock-dead) . (fastrevert-process-send-eof ,dead))
                     ((accept-process-output ,stock-dead 0.1)
                      . (fastrevert-accept-process-output ,dead 0.1))
                     ((accept-process-output ,stock-dead) . (fastrevert-accept-process-output ,dead))
                     ((process-status ,stock-dead) . (fastrevert-process-status ,dead))
                     ((signal-process ,stock-dead 'SIGTERM) . (fastrevert-process-signal ,dead 'SIGTERM))
                     ((signal-process ,stock-dead 'SIGNOPE) . (fastrevert-process-signal ,dead 'SIGNOPE))
                     ((signal-process ,stock-dead ,(expt 2 40))
                      . (fastrevert-process-signal ,dead ,(expt 2 40)))
                     ((delete-process ,stock-dead) . (fastrevert-delete-process ,dead))
                     ((make-process :name "w" :command '("true" 5))
                      . (fastrevert-make-process :name "w" :command '("true" 5)))
                     ((make-process :name "w" :command '("tr\0ue"))
                      . (fastrevert-make-process :name "w" :command '("tr\0ue")))
                     ((make-process :command '("true")) . (fastrevert-make-process :command '("true")))
                     ((make-process :name "w" :command '("true") :buffer 5)
                      . (fastrevert-make-process :name "w" :command '("true") :buffer 5))))
      (ert-info ((format "%S" ours))
        (should (equal (funcall outcome (lambda () (eval ours t)))
                       (funcall outcome (lambda () (eval stock t)))))))))

;;;; 1. An enormous read size

(ert-deftest fastrevert-robust-huge-read-process-output-max-reads-every-byte ()
  "A child started with `read-process-output-max' at 2^40 is read whole, on the engine."
  (let ((result (fastrevert-robust-test--emacs
                 '(let* ((out nil) (events nil)
                         (process (let ((read-process-output-max (expt 2 40)))
                                    (fastrevert-make-process
                                     :name "huge" :noquery t
                                     :command '("sh" "-c" "sleep 0.2; head -c 300000 /dev/zero")
                                     :filter (lambda (_p text) (push text out))
                                     :sentinel (lambda (_p event) (push event events))))))
                    (ignore process)
                    ;; Long enough for the engine, not this thread, to read it.
                    (sleep-for 0.1)
                    (let ((deadline (+ (float-time) 30)))
                      (while (and (not events) (< (float-time) deadline))
                        (accept-process-output nil 0.05)))
                    (let ((print-escape-newlines t))
                      (princ (format "%d %S\n" (apply #'+ (mapcar #'length out)) events)))))))
    (should (eql (car result) 0))
    (should (string-match-p "^300000 (\"finished\\\\n\")" (cdr result)))))

;;;; 2. The engine stopped inside a drain

(ert-deftest fastrevert-robust-engine-stopped-and-restarted-inside-a-drain ()
  "A result handler that stops the engine, starts another and fails leaves both sound."
  (fastrevert--engine-ensure)
  (let ((echoes nil)
        (calls 0))
    (set-process-filter fastrevert--wake-process #'ignore)
    (dotimes (i 20) (fastrevert--mod-echo i "old"))
    (should (fastrevert--mod-wait 10))
    (should-error
     (fastrevert--mod-drain
      (lambda (_kind _id _code _data)
        (setq calls (1+ calls))
        (fastrevert--engine-stop)
        (fastrevert--engine-ensure)
        (set-process-filter fastrevert--wake-process #'ignore)
        (dotimes (i 5) (fastrevert--mod-echo (+ 100 i) "new"))
        (error "Handler fails after the restart"))))
    (should (= calls 1))
    ;; The new engine holds its own results, none of the old one's.
    (should (fastrevert-test-wait-for
             (lambda ()
               (fastrevert--mod-drain (lambda (_kind id _code data) (push (cons id data) echoes)))
               (>= (length echoes) 5))))
    (should (equal (reverse echoes)
                   '((100 . "new") (101 . "new") (102 . "new") (103 . "new") (104 . "new"))))
    (set-process-filter fastrevert--wake-process #'fastrevert--wake-filter)))

(ert-deftest fastrevert-robust-filter-that-deletes-every-process-loses-nothing ()
  "A filter deleting every process and starting another: both processes end whole."
  (let* ((log nil)
         (second nil)
         (first (fastrevert-make-process
                 :name "first" :noquery t
                 :command '("sh" "-c" "echo one; sleep 0.3; echo two")
                 :filter (lambda (_p text)
                           (push (cons 'first text) log)
                           (unless second
                             (mapc #'delete-process (process-list))
                             (setq second (fastrevert-make-process
                                           :name "second" :noquery t :command '("echo" "bee")
                                           :filter (lambda (_p text) (push (cons 'second text) log))
                                           :sentinel (lambda (_p event)
                                                       (push (cons 'second-end event) log))))))
                 :sentinel (lambda (_p event) (push (cons 'first-end event) log)))))
    (ignore first)
    (should (fastrevert-test-wait-for
             (lambda () (and (assq 'first-end log) (assq 'second-end log))) 30))
    (should (equal (mapconcat #'cdr (reverse (cl-remove 'first log :key #'car :test-not #'eq)) "")
                   "one\ntwo\n"))
    (should (equal (cdr (assq 'first-end log)) "finished\n"))
    (should (equal (cdr (assq 'second log)) "bee\n"))
    (should (equal (cdr (assq 'second-end log)) "finished\n"))))

;;;; 3. Filters that wait for output

(ert-deftest fastrevert-robust-filter-is-never-reentered-and-streams-stay-in-order ()
  "A filter waiting for its own output is not called again inside itself; no stream reorders."
  (let* ((depth 0)
         (deepest 0)
         (slow (fastrevert-robust-test--run
                :name "slow" :command (list "sh" "-c" (fastrevert-robust-test--counting-lines 3000))
                :filter nil))
         (fast (fastrevert-robust-test--run
                :name "fast" :command (list "sh" "-c" (fastrevert-robust-test--counting-lines
                                                       30000)))))
    ;; The slow child's filter waits for more of its own output, and for
    ;; anything, each time it is called.
    (setf (fastrevert--process-filter (plist-get slow :process))
          (lambda (process text)
            (plist-put slow :output (cons text (plist-get slow :output)))
            (setq depth (1+ depth) deepest (max deepest depth))
            (unwind-protect
                (progn (fastrevert-accept-process-output process 0.005)
                       (fastrevert-accept-process-output nil 0.005))
              (setq depth (1- depth)))))
    (fastrevert-robust-test--finish slow 60)
    (fastrevert-robust-test--finish fast 60)
    (should (= deepest 1))
    (should (equal (fastrevert-robust-test--output slow)
                   (fastrevert-robust-test--numbers 0 3000)))
    (should (equal (fastrevert-robust-test--output fast)
                   (fastrevert-robust-test--numbers 0 30000)))
    (should (equal (plist-get slow :events) '("finished\n")))))

(ert-deftest fastrevert-robust-wait-inside-a-filter-sees-its-own-output-arrive ()
  "A filter waiting for its own process without a timeout returns once output arrives."
  (let* ((waits 0)
         (state (fastrevert-robust-test--run
                 :name "own" :command '("sh" "-c" "echo a; sleep 0.2; echo b; sleep 0.2; echo c")
                 :filter nil)))
    (setf (fastrevert--process-filter (plist-get state :process))
          (lambda (process text)
            (plist-put state :output (cons text (plist-get state :output)))
            (when (equal text "a\n")
              ;; No timeout: it must not wait for ever for output that can
              ;; only be delivered after this filter returns.
              (setq waits (1+ waits))
              (fastrevert-accept-process-output process))))
    (fastrevert-robust-test--finish state)
    (should (= waits 1))
    (should (equal (fastrevert-robust-test--output state) "a\nb\nc\n"))))

(ert-deftest fastrevert-robust-a-nested-drain-goes-on-from-the-next-result ()
  "A handler that drains again handles the results its outer drain left, first."
  (fastrevert--engine-ensure)
  (let ((order nil)
        (records (lambda () (plist-get (fastrevert--mod-stats) :records)))
        (before nil))
    (set-process-filter fastrevert--wake-process #'ignore)
    (unwind-protect
        (progn
          (fastrevert--drain)
          (setq before (funcall records))
          (dotimes (i 6) (fastrevert--mod-echo i ""))
          (should (fastrevert-test-wait-for (lambda () (>= (funcall records) (+ before 6)))))
          (letrec ((handler
                    (lambda (_kind id _code _data)
                      (push id order)
                      (when (eql id 1)
                        ;; A result the engine emits meanwhile comes after
                        ;; those already waiting.
                        (fastrevert--mod-echo 100 "")
                        (fastrevert--mod-wait 10)
                        (fastrevert-test-wait-for
                         (lambda () (>= (funcall records) (+ before 7))))
                        (fastrevert--mod-drain handler)))))
            (fastrevert--mod-drain handler)
            (fastrevert--mod-drain handler))
          (should (equal (reverse order) '(0 1 2 3 4 5 100))))
      (set-process-filter fastrevert--wake-process #'fastrevert--wake-filter))))

;;;; 4. Timers during a busy wait

(defun fastrevert-robust-test--timer-fires-during-busy-wait (just-this-one)
  "Return when a 0.3 s timer fired while `yes' was waited on, or nil.
JUST-THIS-ONE is passed to `fastrevert-accept-process-output'.  It
runs in another Emacs: a wait that never returns fails the test
instead of hanging the suite."
  (let ((result (fastrevert-robust-test--emacs
                 `(let* ((start (float-time))
                         (fired nil)
                         (timer (run-at-time 0.3 nil (lambda () (setq fired (- (float-time) start)))))
                         (process (fastrevert-make-process :name "yes" :command '("yes")
                                                           :noquery t :filter #'ignore)))
                    (while (and (not fired) (< (- (float-time) start) 10))
                      (fastrevert-accept-process-output process 0.05 nil ,just-this-one))
                    (cancel-timer timer)
                    (fastrevert-delete-process process)
                    (princ (format "fired %S\n" fired)))
                 60)))
    (should (eql (car result) 0))
    (and (string-match "^fired \\([0-9.]+\\)$" (cdr result))
         (string-to-number (match-string 1 (cdr result))))))

(ert-deftest fastrevert-robust-timers-run-while-a-busy-stream-is-waited-on ()
  (should (fastrevert-robust-test--timer-fires-during-busy-wait nil))
  ;; JUST-THIS-ONE t keeps other processes waiting, not timers.
  (should (fastrevert-robust-test--timer-fires-during-busy-wait t)))

;;;; 5. A file system that hangs at exit

(ert-deftest fastrevert-robust-kill-emacs-does-not-wait-for-a-hung-stat ()
  "Emacs exits at once while a stat the watcher started hangs for 60 s."
  (let* ((start (float-time))
         (result (fastrevert-robust-test--emacs
                  `(progn
                     (fastrevert--engine-ensure)
                     (fastrevert--mod-test-watch-fault 'stat-delay-ms 60000)
                     (fastrevert--mod-watch-add 1 ,(expand-file-name "lisp/fastrevert.el"
                                                                      fastrevert-test-root)
                                                'notify)
                     (while (= 0 (fastrevert--mod-test-delayed-stats)) (sleep-for 0.01))
                     (kill-emacs 0))
                  90)))
    (should (eql (car result) 0))
    ;; Without the hang, a batch Emacs starts and exits in well under a
    ;; second; 20 s leaves room for a loaded machine and nothing for the
    ;; 60 s stat.
    (should (< (- (float-time) start) 20))))

;;;; 6. Every process deleted at once

(defmacro fastrevert-robust-test--with-watched-buffer (buffer file &rest body)
  "Run BODY with BUFFER visiting FILE, \"one\\n\", watched by the engine.
`fastrevert-mode' and `global-auto-revert-mode' are on meanwhile."
  (declare (indent 2))
  `(fastrevert-test-with-temp-dir dir
     (let ((,file (expand-file-name "watched.txt" dir))
           (global-auto-revert-mode-was global-auto-revert-mode)
           (,buffer nil))
       (with-temp-file ,file (insert "one\n"))
       (unwind-protect
           (progn
             (fastrevert-mode 1)
             (global-auto-revert-mode 1)
             (setq ,buffer (find-file-noselect ,file))
             (should (fastrevert-test-wait-for
                      (lambda () (fastrevert--watching-p ,buffer))))
             ,@body)
         (when (buffer-live-p ,buffer) (kill-buffer ,buffer))
         (unless global-auto-revert-mode-was (global-auto-revert-mode -1))
         (fastrevert-mode -1)))))

(defun fastrevert-robust-test--reverts-to-two (buffer file)
  "Rewrite FILE as \"two\\n\" and check that BUFFER follows."
  (with-temp-file file (insert "two\n"))
  (should (fastrevert-test-wait-for
           (lambda () (equal (with-current-buffer buffer (buffer-string)) "two\n"))
           20)))

(ert-deftest fastrevert-robust-deleting-every-process-keeps-auto-revert-and-processes ()
  "After (mapc #\\='delete-process (process-list)) buffers revert and processes finish."
  (fastrevert-robust-test--with-watched-buffer buffer file
    (let ((state (fastrevert-robust-test--run
                  :name "survivor" :command '("sh" "-c" "sleep 0.5; echo late"))))
      (mapc #'delete-process (process-list))
      (fastrevert-robust-test--reverts-to-two buffer file)
      (fastrevert-robust-test--finish state)
      (should (equal (fastrevert-robust-test--output state) "late\n"))
      (should (equal (plist-get state :events) '("finished\n")))
      (should (fastrevert--engine-live-p)))))

(ert-deftest fastrevert-robust-a-restarted-engine-watches-again-and-reports-killed-processes ()
  "Stopping the engine tells each process's sentinel; a new engine gets every watch back."
  (fastrevert-robust-test--with-watched-buffer buffer file
    (let ((state (fastrevert-robust-test--run :name "doomed" :command '("sleep" "30"))))
      (fastrevert--engine-stop)
      (should (equal (plist-get state :events) '("killed\n")))
      (should (eq (fastrevert-process-status (plist-get state :process)) 'signal)))
    (fastrevert--engine-ensure)
    (should (fastrevert-test-wait-for
             (lambda () (fastrevert--watching-p buffer))))
    (fastrevert-robust-test--reverts-to-two buffer file)))

;;;; 7. Invalid coding systems

(ert-deftest fastrevert-robust-invalid-coding-signals-at-the-call-as-stock ()
  (dolist (case '((:coding fastrevert-no-such-coding)
                  (:coding (fastrevert-no-such-coding . utf-8))
                  (:coding (utf-8 . fastrevert-no-such-coding))
                  (:coding 42)
                  (:coding t)
                  (:coding "utf-8")
                  (coding-system-for-read fastrevert-no-such-coding)
                  (coding-system-for-write fastrevert-no-such-coding)))
    (let* ((keyword (keywordp (car case)))
           (arguments (append '(:name "coding" :command ("true") :noquery t)
                              (and keyword case)))
           (coding-system-for-read (if (eq (car case) 'coding-system-for-read) (cadr case)
                                     coding-system-for-read))
           (coding-system-for-write (if (eq (car case) 'coding-system-for-write) (cadr case)
                                      coding-system-for-write))
           (stock (condition-case error
                      (progn (delete-process (apply #'make-process arguments)) 'accepted)
                    (error error)))
           (ours (condition-case error
                     (progn (fastrevert-delete-process (apply #'fastrevert-make-process arguments))
                            'accepted)
                   (error error))))
      (ert-info ((format "%S" case))
        (should-not (eq stock 'accepted))
        (should (equal ours stock))))))

;;;; 8. Durations

(ert-deftest fastrevert-robust-wait-saturates-infinite-and-huge-seconds ()
  "An infinite or huge wait waits for a result instead of returning at once."
  (fastrevert--engine-ensure)
  (dolist (seconds (list 1.0e+INF most-positive-fixnum 1e13 (expt 2 70)))
    (ert-info ((format "%S" seconds))
      ;; Nothing left over waits: the wait below can only end for the child.
      (while (fastrevert--mod-wait 0) (fastrevert--drain))
      (let* ((start (float-time))
             (state (fastrevert-robust-test--run
                     :name "late" :command '("sh" "-c" "sleep 0.2; echo late"))))
        (should (fastrevert--mod-wait seconds))
        (should (>= (- (float-time) start) 0.15))
        ;; What a wait finds ready is the caller's to drain.
        (fastrevert--drain)
        (fastrevert-robust-test--finish state)))))

(ert-deftest fastrevert-robust-every-primitive-taking-seconds-refuses-nan-and-negatives ()
  (fastrevert--engine-ensure)
  (dolist (bad (list 0.0e+NaN -1 -0.5 -1.0e+INF (- (expt 2 70))))
    (ert-info ((format "%S" bad))
      (should (equal (should-error (fastrevert--mod-wait bad) :type 'args-out-of-range)
                     (list 'args-out-of-range bad)))
      (should (equal (should-error (fastrevert--mod-wait-drain bad #'ignore)
                                   :type 'args-out-of-range)
                     (list 'args-out-of-range bad)))
      (should-error (fastrevert--mod-watch-configure bad 0.03 nil) :type 'args-out-of-range)
      (should-error (fastrevert--mod-watch-configure 5 bad nil) :type 'args-out-of-range)
      (should-error (fastrevert--mod-stop bad) :type 'args-out-of-range)
      (should-error (fastrevert--mod-watch-hold-limit bad) :type 'args-out-of-range)
      (should (fastrevert--mod-running-p))))
  (dolist (bad (list "1" 'one [1] (make-marker)))
    (should-error (fastrevert--mod-wait bad) :type 'wrong-type-argument)
    (should-error (fastrevert--mod-wait-drain bad #'ignore) :type 'wrong-type-argument)
    (should-error (fastrevert--mod-wait-drain 0 bad) :type 'wrong-type-argument)
    (should-error (fastrevert--mod-stop bad) :type 'wrong-type-argument)
    (should-error (fastrevert--mod-watch-configure bad 0.03 nil) :type 'wrong-type-argument)
    (should-error (fastrevert--mod-watch-hold-limit bad) :type 'wrong-type-argument)))

(ert-deftest fastrevert-robust-stop-with-a-huge-timeout-waits-for-the-engine ()
  (dolist (seconds (list most-positive-fixnum 1.0e+INF 1e13 (expt 2 70)))
    (ert-info ((format "%S" seconds))
      (fastrevert--engine-ensure)
      ;; Children to kill and reap make the stop take a moment.
      (dotimes (_ 20)
        (fastrevert-make-process :name "stopped" :command '("sleep" "30") :noquery t))
      (fastrevert--mod-wait 0.05)
      (should-not (fastrevert--mod-stop seconds))
      (should-not (fastrevert--mod-running-p))))
  (fastrevert--engine-stop)
  (fastrevert--engine-ensure))

(ert-deftest fastrevert-robust-an-infinite-poll-interval-never-polls ()
  (fastrevert-test-with-temp-dir dir
    (let ((file (expand-file-name "polled.txt" dir))
          (changes nil))
      (with-temp-file file (insert "one"))
      (fastrevert--engine-ensure)
      (let ((fastrevert--record-handlers
             (append (list (cons 'file-changed (lambda (id _code _data) (push id changes)))
                           (cons 'file-watched #'ignore))
                     fastrevert--record-handlers)))
        (unwind-protect
            (progn
              ;; A short interval polls: the change is seen.
              (fastrevert--mod-watch-configure 0.05 0.01 nil)
              (fastrevert--mod-watch-add 901 (fastrevert--encode-file-name file) 'poll)
              (fastrevert-test-wait-for (lambda () nil) 0.3)
              (with-temp-file file (insert "two, longer"))
              (should (fastrevert-test-wait-for (lambda () (memq 901 changes))))
              ;; An infinite one never polls (it once became 1 ms).
              (setq changes nil)
              (fastrevert--mod-watch-configure 1.0e+INF 0.01 nil)
              (fastrevert-test-wait-for (lambda () nil) 0.2)
              (with-temp-file file (insert "three, longer still"))
              (should-not (fastrevert-test-wait-for (lambda () (memq 901 changes)) 1)))
          (fastrevert--mod-watch-remove 901)
          (fastrevert--configure-engine))))))

(ert-deftest fastrevert-robust-sigterm-ends-emacs-during-an-infinite-native-wait ()
  (fastrevert-test-with-temp-dir dir
    (let* ((ready (expand-file-name "ready" dir))
           (process-environment (fastrevert-test-emacs-environment))
           (emacs (make-process
                   :name "fastrevert-robust-sigterm" :buffer nil :noquery t
                   :command (list (expand-file-name invocation-name invocation-directory)
                                  "-Q" "--batch"
                                  "-L" fastrevert-test-lisp-directory
                                  "--eval"
                                  (prin1-to-string
                                   `(progn
                                      (setq load-prefer-newer t)
                                      (require 'fastrevert)
                                      (fastrevert--engine-ensure)
                                      (fastrevert--drain)
                                      (write-region "" nil ,ready)
                                      (fastrevert--mod-wait 1.0e+INF)
                                      ;; Returning at once is the failure.
                                      (kill-emacs 7)))))))
      (unwind-protect
          (progn
            (should (fastrevert-test-wait-for (lambda () (file-exists-p ready)) 30))
            ;; Inside the native wait by now, or about to be.
            (fastrevert-test-wait-for (lambda () (not (process-live-p emacs))) 0.3)
            (should (process-live-p emacs))
            (signal-process emacs 'SIGTERM)
            (should (fastrevert-test-wait-for (lambda () (not (process-live-p emacs))) 20))
            (should-not (eql (process-exit-status emacs) 7)))
        (delete-process emacs)))))

;;;; 9. Descriptors the module did not make

(ert-deftest fastrevert-robust-a-process-memfd-stays-in-the-module-and-closes-with-it ()
  "A process's memfd is never handed to Lisp, and is closed once the process is gone."
  (let* ((threshold fastrevert--memfd-threshold)
         (buffer (generate-new-buffer " *fastrevert-robust-memfd*"))
         (memfds (lambda ()
                   (cl-loop for name in (directory-files "/proc/self/fd" nil "\\`[0-9]+\\'")
                            for link = (file-symlink-p (concat "/proc/self/fd/" name))
                            when (and link (string-match-p "fastrevert-process.* (deleted)" link))
                            collect name)))
         (process (fastrevert-make-process
                   :name "memfd" :buffer buffer :noquery t
                   :command (list "sh" "-c" (format "head -c %d /dev/zero; sleep 30"
                                                    (* 4 threshold))))))
    (unwind-protect
        (progn
          (should (fastrevert-test-wait-for (lambda () (= (buffer-size buffer) (* 4 threshold)))))
          (should (funcall memfds))
          (should-not (apropos-internal "\\`fastrevert--mod-memfd" #'fboundp))
          (fastrevert-delete-process process)
          (should (fastrevert-test-wait-for (lambda () (null (funcall memfds))))))
      (fastrevert-delete-process process)
      (kill-buffer buffer))))

;;;; 10. Smaller differences from stock

(ert-deftest fastrevert-robust-killing-a-process-buffer-hangs-up-its-process-as-stock ()
  (let ((script "trap 'exit 3' HUP; sleep 30 & wait")
        (stock-events nil)
        (ours nil))
    (let* ((buffer (generate-new-buffer " *fastrevert-robust-hup-stock*"))
           (process (make-process :name "hup" :buffer buffer :noquery t
                                  :command (list "sh" "-c" script)
                                  :sentinel (lambda (_p event) (push event stock-events)))))
      (fastrevert-test-wait-for (lambda () nil) 0.3)
      (kill-buffer buffer)
      (should (fastrevert-test-wait-for (lambda () stock-events) 10))
      (ignore process))
    (let ((buffer (generate-new-buffer " *fastrevert-robust-hup*")))
      (setq ours (fastrevert-robust-test--run :name "hup" :buffer buffer :filter nil
                                              :command (list "sh" "-c" script)))
      (fastrevert-test-wait-for (lambda () nil) 0.3)
      (kill-buffer buffer)
      (fastrevert-robust-test--finish ours 10))
    (should (equal stock-events '("exited abnormally with code 3\n")))
    (should (equal (plist-get ours :events) stock-events))))

(ert-deftest fastrevert-robust-signalling-a-dead-process-returns-minus-one-as-stock ()
  (let ((stock (make-process :name "dead" :command '("true") :noquery t :buffer nil))
        (ours (fastrevert-robust-test--finish
               (fastrevert-robust-test--run :name "dead" :command '("true")))))
    (should (fastrevert-test-wait-for (lambda () (not (process-live-p stock)))))
    (should (eql (fastrevert-process-signal (plist-get ours :process) 'SIGTERM)
                 (signal-process stock 'SIGTERM)))
    (should (eql (fastrevert-process-signal (plist-get ours :process) 'SIGTERM) -1))))

(ert-deftest fastrevert-robust-too-long-program-names-signal-file-error-as-stock ()
  (dolist (program (list (make-string 5000 ?a)
                         (concat temporary-file-directory (make-string 300 ?b))
                         (make-string 300 ?c)))
    (ert-info ((format "program of %d characters" (length program)))
      (let ((stock (condition-case error (call-process program) (error (car error)))))
        (should (eq stock 'file-error))
        (should (eq (condition-case error (fastrevert-call-process program)
                      (error (car error)))
                    stock)))))
  ;; `make-process' searches for a relative name only.
  (let ((program (make-string 300 ?c)))
    (should (eq (condition-case error (make-process :name "long" :command (list program))
                  (error (car error)))
                'file-error))
    (should (eq (condition-case error (fastrevert-make-process :name "long" :command (list program))
                  (error (car error)))
                'file-error))))

(ert-deftest fastrevert-robust-an-absolute-program-that-cannot-run-ends-as-stock ()
  "`make-process' runs an absolute name unsearched, and fails as stock does.
fastrevert's processes talk through pipes, so stock is asked on pipes
too: an Emacs that spawns with posix_spawn there (Emacs 30) signals, one
that uses vfork (Emacs 28) starts a child that says why it failed."
  (cl-flet ((outcome (make program)
              (let ((output nil)
                    (events nil))
                (condition-case err
                    (progn
                      (funcall make :name "absolute" :command (list program) :noquery t
                               :connection-type 'pipe
                               :filter (lambda (_p text) (push text output))
                               :sentinel (lambda (_p event) (push event events)))
                      (should (fastrevert-test-wait-for (lambda () events)))
                      (list events (apply #'concat (reverse output))))
                  (file-error (list 'signalled err))))))
    (dolist (program (list "/nonexistent/fastrevert-program"
                           (concat temporary-file-directory (make-string 300 ?b))
                           "/etc/passwd"))
      (ert-info ((format "program of %d characters" (length program)))
        (should (equal (outcome #'fastrevert-make-process program)
                       (outcome #'make-process program))))))
  (should (equal (should-error (fastrevert-make-process :name "directory" :command '("/tmp")))
                 (should-error (make-process :name "directory" :command '("/tmp"))))))

;;;; 11. Unloading

(ert-deftest fastrevert-robust-unload-feature-turns-everything-off ()
  (let ((result (fastrevert-robust-test--emacs
                 '(progn
                    (fastrevert-mode 1)
                    (let ((ended nil))
                      (fastrevert-make-process :name "alive" :command '("sleep" "30") :noquery t
                                               :sentinel (lambda (_p event) (setq ended event)))
                      (unload-feature 'fastrevert t)
                      (let ((print-escape-newlines t))
                        (princ (format "ended %S\n" ended))))
                    (princ (format "processes %S\n" (process-list)))
                    (princ (format "running %S\n" (fastrevert--mod-running-p)))
                    (princ (format "features %S\n"
                                   (cl-remove-if-not
                                    (lambda (feature)
                                      (memq feature '(fastrevert fastrevert-process)))
                                    features)))
                    ;; Nothing calls into the unloaded Lisp any more.
                    (let ((deadline (+ (float-time) 0.5)))
                      (while (< (float-time) deadline) (accept-process-output nil 0.05)))
                    (princ "survived\n")))))
    (should (eql (car result) 0))
    (should (string-match-p "^ended \"killed\\\\n\"$" (cdr result)))
    (should (string-match-p "^processes nil$" (cdr result)))
    (should (string-match-p "^running nil$" (cdr result)))
    (should (string-match-p "^features nil$" (cdr result)))
    (should (string-match-p "^survived$" (cdr result)))))

(provide 'fastrevert-robust-test)

;;; fastrevert-robust-test.el ends here
