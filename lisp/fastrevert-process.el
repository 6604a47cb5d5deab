;;; fastrevert-process.el --- Child processes the engine reads -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; Keywords: processes

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; `fastrevert-make-process' takes the keywords of `make-process' (plus
;; :framing) and returns a `fastrevert-process', which the
;; `fastrevert-process-*' companions handle as their stock namesakes
;; handle a process.  The engine thread reads the child's output and
;; hands it to Emacs in coalesced batches: a filter is called once per
;; stream per wake-up, however many small writes the child made.  With
;; :framing `lines' a filter only ever sees complete lines, and with
;; `lsp' only complete Content-Length messages.  Output for a buffer
;; (no filter) takes the road `fastrevert-call-process' takes: the
;; engine appends it to a memfd, and Emacs inserts each new range with
;; `insert-file-contents' at the process mark, so no Lisp string is
;; made for it.
;;
;; This file holds the process object, how the engine's records of its
;; output and end reach its filter, buffer and sentinel, and the
;; companions.  How a child is started as stock starts it is in
;; fastrevert-child.el, and how its bytes become text in
;; fastrevert-decode.el.

;;; Code:

(require 'cl-lib)
(require 'fastrevert-engine)
(require 'fastrevert-child)
(require 'fastrevert-decode)

(declare-function fastrevert--mod-memfd-release "fastrevert-module" (fd end close))
(declare-function fastrevert--mod-memfd-read "fastrevert-module" (fd beg end))
(declare-function fastrevert--mod-process-start "fastrevert-module"
                  (id program argv env cwd stdin stdout stderr framing read-size))
(declare-function fastrevert--mod-process-send "fastrevert-module" (id string))
(declare-function fastrevert--mod-process-eof "fastrevert-module" (id))
(declare-function fastrevert--mod-process-signal "fastrevert-module" (id signal))
(declare-function fastrevert--mod-process-remove "fastrevert-module" (id))
(declare-function fastrevert--mod-signal-number "fastrevert-module" (name))
(declare-function fastrevert--mod-strsignal "fastrevert-module" (signal))

;;;; The process object


(cl-defstruct (fastrevert-process
               (:constructor fastrevert--process-create)
               ;; Positional, for `fastrevert-make-process': keyword
               ;; arguments would cost a list and a search per call.
               (:constructor fastrevert--process-start-record
                             (id name command buffer mark stderr-buffer stderr-mark
                                 filter sentinel decoding encoding query-on-exit engine))
               (:conc-name fastrevert--process-)
               (:predicate fastrevert-process-p)
               (:copier nil)
               ;; Its slots DECODING, TAILS and STATES.
               (:include fastrevert--decoder))
  "A child process run by fastrevert's engine.
Use the `fastrevert-process-*' functions rather than the slots."
  (id nil :documentation "The engine's id for the process.")
  (name nil :documentation "The process name, unique among fastrevert processes.")
  (command nil :documentation "The command line, a list of strings.")
  (pid nil :documentation "The process id of the child.")
  (buffer nil :documentation "The buffer output goes to, or nil.")
  (mark nil :documentation "The process mark in BUFFER.")
  (stderr-buffer nil :documentation "The buffer for standard error, or nil.")
  (stderr-mark nil :documentation "The mark in STDERR-BUFFER.")
  (filter nil :documentation "The filter function, or nil.")
  (sentinel nil :documentation "The sentinel function, or nil.")
  (encoding nil :documentation "The coding system that encodes input.")
  (memfd nil :documentation "The memfd that receives stdout, or nil.
For a process with a buffer and no filter, the engine makes one once
the output is no longer small, and hands it over: its standard output
is then inserted from there, by ranges.")
  (memfd-consumed 0 :documentation "How many bytes of MEMFD were delivered.")
  (memfd-released 0 :documentation "How many bytes of MEMFD gave their memory back.")
  (memfd-end 0 :documentation "How many bytes the engine has written to MEMFD.")
  (memfd-tail "" :documentation "The last bytes written to MEMFD, as a range record tells.")
  (status 'run :documentation "One of `run', `exit' or `signal'.")
  (exit-status 0 :documentation "The exit code or signal number.")
  (core-dumped nil :documentation "Non-nil if the child dumped core.")
  (query-on-exit t :documentation "Non-nil to ask before Emacs kills it.")
  (outputs 0 :documentation "Counts batches of output as they are delivered.
It also moves when output arrives that must wait (see QUEUE), so
that a wait for output sees it has come.")
  (plist nil :documentation "A property list for the caller.")
  (engine nil :documentation "The `fastrevert--engine-generation' this started in.
A restarted engine has forgotten the process (stopping it killed the
child), which this tells apart.")
  (busy nil :documentation "Non-nil while the process's output or end is handled.")
  (queue nil :documentation "Results of the process that wait for BUSY to clear.
A list of (HANDLER CODE DATA), oldest first."))

(cl-defmethod cl-print-object ((process fastrevert-process) stream)
  "Print PROCESS to STREAM by name, as Emacs prints a process."
  (princ (format "#<fastrevert-process %s>" (fastrevert--process-name process)) stream))

(defvar fastrevert--processes (make-hash-table :test #'eql)
  "Live fastrevert processes by engine id.")

(defvar fastrevert--process-output-count 0
  "How many batches of process output have been delivered, in total.")

(defvar fastrevert--process-names (make-hash-table :test #'equal)
  "Name -> the fastrevert process of that name in `fastrevert--processes'.")

(defun fastrevert--process-unique-name (name)
  "Return NAME, or NAME<N> if a fastrevert process has that name.
N counts from 1, as `make-process' numbers its processes."
  (let ((candidate name)
        (n 0))
    (while (gethash candidate fastrevert--process-names)
      (setq n (1+ n)
            candidate (format "%s<%d>" name n)))
    candidate))

(defun fastrevert--process-forget (process)
  "Remove PROCESS from the tables of live fastrevert processes."
  (remhash (fastrevert--process-id process) fastrevert--processes)
  (let ((name (fastrevert--process-name process)))
    (when (eq (gethash name fastrevert--process-names) process)
      (remhash name fastrevert--process-names))))

(defun fastrevert--process-check (process)
  "Signal `wrong-type-argument' unless PROCESS is a `fastrevert-process'."
  (unless (fastrevert-process-p process)
    (signal 'wrong-type-argument (list 'fastrevert-process-p process))))

;;;; Delivering output

(defun fastrevert--process-call (kind function &rest args)
  "Call FUNCTION with ARGS as a process KIND, in the stock manner.
KIND is \"filter\" or \"sentinel\".
An error is reported rather than propagated, unless `debug-on-error'
asks for the debugger, and the match data are preserved."
  (save-match-data
    (condition-case-unless-debug err
        (apply function args)
      (error (message "error in process %s: %s" kind (error-message-string err))))))

(defun fastrevert--process-count-output (process)
  "Count one batch of output of PROCESS as delivered."
  (setf (fastrevert--process-outputs process) (1+ (fastrevert--process-outputs process)))
  (setq fastrevert--process-output-count (1+ fastrevert--process-output-count)))

(defun fastrevert--process-deliver (process stream text &optional detected)
  "Deliver TEXT, output of PROCESS on STREAM, to its consumer.
STREAM is `fastrevert--output-stdout-bytes' or
`fastrevert--output-stderr-bytes'.
DETECTED is as for `fastrevert--insert-output'."
  (unless (equal text "")
    (fastrevert--process-count-output process)
    (if (eql stream fastrevert--output-stderr-bytes)
        (fastrevert--insert-output (fastrevert--process-stderr-buffer process)
                                    (fastrevert--process-stderr-mark process) text detected)
      (let ((filter (fastrevert--process-filter process)))
        (if filter
            (fastrevert--process-call
             "filter" filter process
             ;; Decoding ASCII gives back the unibyte bytes; a stock
             ;; filter gets a multibyte string from any coding system
             ;; but the raw-text family.
             (if (or (multibyte-string-p text)
                     (eq (coding-system-type (fastrevert--process-decoding process)) 'raw-text))
                 text
               (string-to-multibyte text)))
          (fastrevert--insert-output (fastrevert--process-buffer process)
                                      (fastrevert--process-mark process) text detected))))))

(defun fastrevert--process-decode-and-deliver (process stream data eof)
  "Decode DATA, output of PROCESS on STREAM, and deliver it.
EOF is as for `fastrevert--process-decode'."
  (let* ((coding (fastrevert--process-decoding process))
         (text (fastrevert--process-decode process stream data eof)))
    (fastrevert--process-deliver
     process stream text
     ;; Detection settles a coding system of another kind; finding only
     ;; the end-of-line convention keeps the kind.
     (not (eq (coding-system-base coding)
              (coding-system-base (fastrevert--process-decoding process)))))))

(defun fastrevert--on-process-output (id code data)
  "Handle output DATA of engine process ID on stream CODE.
See `fastrevert--process-output' for the codes."
  (let ((process (gethash id fastrevert--processes)))
    (cond (process
           (fastrevert--process-receive process #'fastrevert--process-output code data))
          ((eql code fastrevert--output-stdout-memfd)
           ;; A memfd for a process already forgotten.
           (fastrevert--mod-memfd-release (string-to-number data) 0 t)))))

(defun fastrevert--process-output (process code data)
  "Handle output DATA of PROCESS on stream CODE.
CODE `fastrevert--output-stdout-memfd' hands over the process's
memfd: DATA is the number of a descriptor of it, which is then the
process's to close.  CODE `fastrevert--output-stdout-range' means DATA
tells how far the engine has written that memfd (see
`fastrevert--process-memfd-ready')."
  (let ((live (eq (gethash (fastrevert--process-id process) fastrevert--processes) process)))
    (cond
     ((eql code fastrevert--output-stdout-memfd)
      (let ((fd (string-to-number data)))
        (if live
            (setf (fastrevert--process-memfd process) fd)
          (fastrevert--mod-memfd-release fd 0 t))))
     ((not live))
     ((eql code fastrevert--output-stdout-range)
      (fastrevert--process-memfd-ready process data))
     (t
      (when (and (eql code fastrevert--output-stdout-bytes)
                 (fastrevert--process-memfd process))
        ;; The engine could not write the memfd and passes the rest as
        ;; strings: what it wrote and Emacs has not delivered comes first.
        (fastrevert--process-memfd-to-tail process))
      (fastrevert--process-decode-and-deliver process code data nil)))))

(defun fastrevert--process-receive (process handler code data)
  "Call HANDLER on CODE and DATA of PROCESS, in turn.
HANDLER is called as (HANDLER PROCESS CODE DATA).  A process's
results are handled one at a time and in the order the engine sent
them: one that arrives while another is being handled (a filter
waiting for more output drains the engine again) waits in the
process's queue, and is handled as soon as the one before returns.
So a filter is never called while it runs, as with stock Emacs, and
no output overtakes the output before it."
  (if (or (fastrevert--process-busy process) (fastrevert--process-queue process))
      (progn
        (setf (fastrevert--process-queue process)
              (nconc (fastrevert--process-queue process) (list (list handler code data))))
        ;; A wait for this process's output must see that it has come.
        (fastrevert--process-count-output process)
        (unless (fastrevert--process-busy process)
          (fastrevert--process-run-queue process)))
    (setf (fastrevert--process-busy process) t)
    (unwind-protect
        (progn
          (funcall handler process code data)
          (fastrevert--process-run-queue process))
      (fastrevert--process-done-handling process))))

(defun fastrevert--process-run-queue (process)
  "Handle the results waiting in PROCESS's queue, oldest first."
  (setf (fastrevert--process-busy process) t)
  (unwind-protect
      (while (fastrevert--process-queue process)
        (let ((item (pop (fastrevert--process-queue process))))
          (apply (car item) process (cdr item))))
    (fastrevert--process-done-handling process)))

(defun fastrevert--process-done-handling (process)
  "Note that PROCESS's results are no longer being handled.
Results left in its queue, by a handler that exited non-locally (a
quit), are handled as soon as Emacs gets round to it."
  (setf (fastrevert--process-busy process) nil)
  (when (fastrevert--process-queue process)
    (run-at-time 0 nil #'fastrevert--process-resume process)))

(defun fastrevert--process-resume (process)
  "Handle the results left waiting in PROCESS's queue."
  (unless (or (fastrevert--process-busy process) (null (fastrevert--process-queue process)))
    (fastrevert--process-run-queue process)))

;;;; Delivering output through a memfd

(defun fastrevert--process-memfd-bytes (fd beg end)
  "Return bytes [BEG, END) of the memfd FD as a unibyte string."
  (fastrevert--mod-memfd-read fd beg end))

(defconst fastrevert--memfd-insert-threshold 4096
  "Ranges of a memfd longer than this are inserted with `insert-file-contents'.
Shorter ones are read as a string and decoded: for a few bytes that
costs less than opening the file, and makes little garbage.")

(defconst fastrevert--memfd-release-step (* 1024 1024)
  "How many delivered bytes of a memfd wait before their memory is given back.")

(defun fastrevert--process-memfd-deliver (process eof)
  "Deliver the bytes the engine wrote to PROCESS's memfd since the last time.
The end of a character that has not arrived yet, and a carriage
return that may begin a CRLF, wait for the next range, unless EOF.
Into a live multibyte buffer, in a coding system whose unfinished
characters the last bytes of the stream reveal, a range longer than
`fastrevert--memfd-insert-threshold' goes straight from the memfd;
otherwise (a short range, bytes held back from before, a unibyte or
killed buffer, a multibyte coding system of another kind, one still
to be detected where that decides where markers go) the bytes take
the string road."
  (let* ((fd (fastrevert--process-memfd process))
         (beg (fastrevert--process-memfd-consumed process))
         (written (fastrevert--process-memfd-end process))
         (coding (fastrevert--process-decoding process))
         (direct (memq (fastrevert--split-kind coding) '(utf-8 single)))
         (held (if (or eof (not direct)) 0
                 (min (- written beg)
                      (fastrevert--held-back coding
                                                     (fastrevert--process-memfd-tail process)))))
         (end (- written held))
         (buffer (fastrevert--process-buffer process)))
    (when (and fd (> end beg))
      (setf (fastrevert--process-memfd-consumed process) end)
      (cond ((not (buffer-live-p buffer))
             ;; The default filter drops output for a killed buffer.
             (fastrevert--process-count-output process))
            ((and direct
                  (> (- end beg) fastrevert--memfd-insert-threshold)
                  ;; Bytes held back from the strings before the memfd
                  ;; took over must be decoded with the first range.
                  (zerop (length (cdr (assq fastrevert--output-stdout-bytes
                                            (fastrevert--process-tails process)))))
                  (buffer-local-value 'enable-multibyte-characters buffer)
                  (not (fastrevert--process-filter process))
                  (not (fastrevert--detection-moves-markers-p coding)))
             (fastrevert--process-count-output process)
             (fastrevert--insert-output
              buffer (fastrevert--process-mark process)
              (lambda ()
                ;; Decoding fixes what `undecided' detected, as Emacs
                ;; does for a process.
                (let ((used (fastrevert--insert-memfd-range fd beg end coding t)))
                  (when (and used (not (eq used coding)))
                    (setf (fastrevert--process-decoding process) used))))))
            (t
             (fastrevert--process-decode-and-deliver
              process fastrevert--output-stdout-bytes
              (fastrevert--process-memfd-bytes fd beg end) (or eof direct))))
      ;; Give back the memory of what is delivered, a step at a time;
      ;; later offsets stay valid.
      (when (>= (- end (fastrevert--process-memfd-released process))
                fastrevert--memfd-release-step)
        (setf (fastrevert--process-memfd-released process) end)
        (fastrevert--mod-memfd-release fd end nil)))))

(defun fastrevert--process-memfd-ready (process data)
  "Deliver what the engine wrote to PROCESS's memfd, as DATA reports it.
DATA is that of a memfd range record; its newest entry counts (see
`fastrevert--memfd-range-entry')."
  (let ((entry (fastrevert--memfd-range-entry data)))
    (setf (fastrevert--process-memfd-end process) (car entry)
          (fastrevert--process-memfd-tail process) (cdr entry))
    (fastrevert--process-memfd-deliver process nil)))

(defun fastrevert--process-memfd-to-tail (process)
  "Move the undelivered bytes of PROCESS's memfd to its stdout tail; close it.
For when the engine passes the rest of the output as strings."
  (let ((fd (fastrevert--process-memfd process))
        (beg (fastrevert--process-memfd-consumed process))
        (end (fastrevert--process-memfd-end process)))
    (when (> end beg)
      (let ((bytes (fastrevert--process-memfd-bytes fd beg end))
            (cell (assq fastrevert--output-stdout-bytes (fastrevert--process-tails process))))
        (setf (fastrevert--process-memfd-consumed process) end)
        (if cell
            (setcdr cell (concat (cdr cell) bytes))
          (push (cons fastrevert--output-stdout-bytes bytes)
                (fastrevert--process-tails process)))))
    (fastrevert--process-memfd-close process)))

(defun fastrevert--process-memfd-close (process)
  "Close PROCESS's memfd, if it has one."
  (let ((fd (fastrevert--process-memfd process)))
    (when fd
      ;; Forget it first: a descriptor number must never be closed twice.
      (setf (fastrevert--process-memfd process) nil)
      (fastrevert--mod-memfd-release fd 0 t))))

(defun fastrevert--process-flush-tails (process)
  "Deliver the bytes PROCESS held back for an unfinished character."
  (dolist (cell (fastrevert--process-tails process))
    (when (cdr cell)
      (let ((bytes (cdr cell)))
        (setcdr cell nil)
        (fastrevert--process-decode-and-deliver process (car cell) bytes t)))))

(defun fastrevert--process-status-message (process)
  "Return the sentinel event string for PROCESS's status, as Emacs words it."
  (let ((code (fastrevert--process-exit-status process))
        (core (if (fastrevert--process-core-dumped process) " (core dumped)\n" "\n")))
    (pcase (fastrevert--process-status process)
      ('exit (if (eql code 0)
                 "finished\n"
               (format "exited abnormally with code %d%s" code core)))
      ('signal
       (let ((name (fastrevert--mod-strsignal code)))
         (if (not name)
             (concat "unknown" core)
           (let ((text (decode-coding-string name (or locale-coding-system 'utf-8))))
             (concat (downcase (substring text 0 1)) (substring text 1) core)))))
      (_ "run\n"))))

(defun fastrevert--process-finish (process)
  "Report PROCESS's end to its sentinel and forget it."
  (fastrevert--process-forget process)
  (fastrevert--process-memfd-close process)
  (let ((event (fastrevert--process-status-message process))
        (sentinel (fastrevert--process-sentinel process)))
    (if sentinel
        (fastrevert--process-call "sentinel" sentinel process event)
      (fastrevert--process-default-sentinel process event))))

(defun fastrevert--process-default-sentinel (process event)
  "Insert EVENT about PROCESS into its buffer, as the stock default sentinel does."
  (let ((buffer (fastrevert--process-buffer process))
        (mark (fastrevert--process-mark process)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (let ((opoint (point))
              (old-read-only buffer-read-only)
              before)
          (goto-char (if (marker-buffer mark) mark (point-max)))
          (setq before (point))
          (setq buffer-read-only nil)
          (unwind-protect
              (insert "\nProcess " (fastrevert--process-name process) " " event)
            (setq buffer-read-only old-read-only))
          (set-marker mark (point))
          (goto-char (if (>= opoint before) (+ opoint (- (point) before)) opoint)))))))

(defun fastrevert--on-process-exit (id code how)
  "Handle the exit of engine process ID, which ended as HOW with CODE.
HOW is the word of a `process-exit' record (`fastrevert--exit-exited'
and its siblings), which says what CODE is."
  (let ((process (gethash id fastrevert--processes)))
    (when process
      (fastrevert--process-receive process #'fastrevert--process-exit code how))))

(defun fastrevert--process-exit (process code how)
  "Report the end of PROCESS, which ended as HOW with CODE.
HOW and CODE are as for `fastrevert--on-process-exit'.  A child whose
status is lost ends as one that exited with code -1, as in Emacs."
  (when (eq (gethash (fastrevert--process-id process) fastrevert--processes) process)
    (when (fastrevert--process-memfd process)
      (fastrevert--process-memfd-deliver process t))
    (fastrevert--process-flush-tails process)
    (setf (fastrevert--process-status process)
          (if (fastrevert--exit-signaled-p how) 'signal 'exit)
          (fastrevert--process-exit-status process) code
          (fastrevert--process-core-dumped process) (equal how fastrevert--exit-core-dumped))
    (fastrevert--process-finish process)))

(defun fastrevert--on-process-error (id code data)
  "Handle the engine giving up engine process ID, for the reason DATA.
CODE is 0."
  (let ((process (gethash id fastrevert--processes)))
    (when process
      (fastrevert--process-receive process #'fastrevert--process-failed code data))))

(defun fastrevert--process-failed (process _code reason)
  "Report that the engine gave PROCESS up, for REASON, and killed it.
Its output could not all be read, so it ends here, as killed; its
exit, when the engine reports it, is not reported again."
  (when (eq (gethash (fastrevert--process-id process) fastrevert--processes) process)
    (message "error in process %s: %s" (fastrevert--process-name process) reason)
    (fastrevert--process-kill process)))

(defun fastrevert--process-kill (process)
  "End PROCESS as killed, and tell its sentinel."
  (fastrevert--process-memfd-close process)
  (setf (fastrevert--process-status process) 'signal
        (fastrevert--process-exit-status process) 9)
  (fastrevert--process-finish process))

(defun fastrevert--process-engine-stopped ()
  "Report the end of every process, after the engine stopped and killed them."
  (let (processes)
    (maphash (lambda (_id process) (push process processes)) fastrevert--processes)
    (dolist (process (nreverse processes))
      (when (eq (fastrevert--process-status process) 'run)
        (fastrevert--process-kill process)))))

(setf (alist-get 'process-output fastrevert--record-handlers) #'fastrevert--on-process-output)
(setf (alist-get 'process-exit fastrevert--record-handlers) #'fastrevert--on-process-exit)
(setf (alist-get 'process-error fastrevert--record-handlers) #'fastrevert--on-process-error)
(add-hook 'fastrevert--engine-stopped-hook #'fastrevert--process-engine-stopped)

;;;; fastrevert-make-process

(defun fastrevert--process-output-buffer (spec)
  "Return the buffer SPEC names, creating it, or nil for nil."
  (and spec (or (get-buffer spec)
                (if (stringp spec) (get-buffer-create spec)
                  (signal 'wrong-type-argument (list 'bufferp spec))))))

(defun fastrevert--process-new-mark (buffer)
  "Return a new process mark at the end of BUFFER, or an unset marker."
  (let ((mark (make-marker)))
    ;; A killed buffer is accepted, as `make-process' accepts it: its
    ;; output goes nowhere.
    (when (buffer-live-p buffer)
      (set-marker mark (with-current-buffer buffer (point-max)) buffer))
    mark))

;;;###autoload
(defun fastrevert-make-process (&rest args)
  "Start a child process, its output read by fastrevert's engine.
ARGS are keywords, as for `make-process':

:name NAME       the process name (a string; made unique);
:buffer BUFFER   the buffer or buffer name output goes to, or nil;
:command COMMAND the program and its arguments, a list of strings;
:coding CODING   a coding system, or (DECODING . ENCODING);
:noquery QUERY   non-nil means do not ask about it when Emacs exits;
:stderr STDERR   a buffer or buffer name for standard error; nil
                 mixes standard error with the output;
:filter FILTER   called as (FILTER PROCESS STRING), once per stream
                 per batch of output;
:sentinel SENTINEL called as (SENTINEL PROCESS EVENT) once, after
                 all output, with Emacs's usual EVENT strings;
:framing FRAMING nil (raw chunks), `lines' (the filter sees only
                 complete lines) or `lsp' (only complete
                 Content-Length messages).

Without a filter, output is inserted into BUFFER at the process mark
as the default filter does; standard output then goes through a
memfd and `insert-file-contents', with no Lisp string made.  Return
a `fastrevert-process'.  The program is found through the variable
`exec-path' and runs in `default-directory' with
`process-environment'; a missing program signals the error
`make-process' signals."
  (let* ((name (plist-get args :name))
         (command (plist-get args :command))
         (framing (plist-get args :framing))
         (filter (plist-get args :filter))
         (sentinel (plist-get args :sentinel))
         (stderr-spec (plist-get args :stderr)))
    (unless (stringp name)
      ;; The stock primitive signals the error the running Emacs words for a
      ;; missing or wrong :name (Emacs 30 words its own), and makes no
      ;; process then.  Called with no argument at all, it does nothing.
      (apply #'make-process (if (plist-member args :name) (list :name name) '(:noquery t)))
      (signal 'wrong-type-argument (list 'stringp name)))
    (unless (consp command) (signal 'wrong-type-argument (list 'consp command)))
    (dolist (word command)
      (unless (stringp word) (signal 'wrong-type-argument (list 'stringp word))))
    (unless (memq framing '(nil lines lsp))
      (signal 'wrong-type-argument (list 'fastrevert-framing-p framing)))
    (dolist (function (list filter sentinel))
      (unless (or (null function) (functionp function))
        (signal 'wrong-type-argument (list 'functionp function))))
    (fastrevert--engine-ensure)
    (let* ((buffer (fastrevert--process-output-buffer (plist-get args :buffer)))
           (stderr-buffer (fastrevert--process-output-buffer stderr-spec))
           (program (car command))
           (dir (fastrevert--process-directory))
           (encoded-path (fastrevert--process-program program))
           (coding (fastrevert--process-coding (plist-get args :coding)
                                               (cons name (cons buffer command))))
           (encoded-args (fastrevert--process-encode-args
                          (cons 'start-process (cons name (cons buffer command)))
                          (cdr command)))
           (id (fastrevert--process-new-id))
           (process (fastrevert--process-start-record
                     id (fastrevert--process-unique-name name) command
                     buffer (fastrevert--process-new-mark buffer)
                     stderr-buffer (fastrevert--process-new-mark stderr-buffer)
                     filter sentinel (car coding) (cdr coding)
                     (not (plist-get args :noquery)) fastrevert--engine-generation))
           (result (fastrevert--mod-process-start
                    id encoded-path (vconcat (list encoded-path) encoded-args)
                    (fastrevert--process-environment dir)
                    (fastrevert--process-encode-file dir)
                    t (if (and buffer (not filter)) 'memfd t)
                    (if stderr-buffer 'pipe t) framing
                    (max 4096 read-process-output-max))))
      (when (eq (car-safe result) :error)
        (fastrevert--process-raise result nil))
      (setf (fastrevert--process-pid process) result)
      (puthash id process fastrevert--processes)
      (puthash (fastrevert--process-name process) process fastrevert--process-names)
      process)))

;;;; Companions

(defun fastrevert-process-live-p (process)
  "Return non-nil if PROCESS, a `fastrevert-process', is still running."
  (fastrevert--process-check process)
  (and (eq (fastrevert--process-status process) 'run)
       (eq (gethash (fastrevert--process-id process) fastrevert--processes) process)
       (eql (fastrevert--process-engine process) fastrevert--engine-generation)
       (fastrevert--mod-running-p)
       t))

(defun fastrevert-process-status (process)
  "Return the status of PROCESS: `run', `exit' or `signal'."
  (fastrevert--process-check process)
  (if (and (eq (fastrevert--process-status process) 'run)
           (not (fastrevert-process-live-p process)))
      'signal
    (fastrevert--process-status process)))

(defun fastrevert-process-name (process)
  "Return the name of PROCESS, a `fastrevert-process'."
  (fastrevert--process-check process)
  (fastrevert--process-name process))

(defun fastrevert-process-command (process)
  "Return the command that started PROCESS, a list of strings."
  (fastrevert--process-check process)
  (fastrevert--process-command process))

(defun fastrevert-process-filter (process)
  "Return the filter function of PROCESS, or nil."
  (fastrevert--process-check process)
  (fastrevert--process-filter process))

(defun fastrevert-process-sentinel (process)
  "Return the sentinel function of PROCESS, or nil."
  (fastrevert--process-check process)
  (fastrevert--process-sentinel process))

(defun fastrevert-process-exit-status (process)
  "Return the exit code of PROCESS, or the number of the signal that ended it.
Return 0 while it runs."
  (fastrevert--process-check process)
  (fastrevert--process-exit-status process))

(defun fastrevert-process-buffer (process)
  "Return the buffer that receives the output of PROCESS, or nil."
  (fastrevert--process-check process)
  (fastrevert--process-buffer process))

(defun fastrevert-process-mark (process)
  "Return the process mark of PROCESS, the position for its output."
  (fastrevert--process-check process)
  (fastrevert--process-mark process))

(defun fastrevert-process-id-of (process)
  "Return the operating system's process id of PROCESS."
  (fastrevert--process-check process)
  (fastrevert--process-pid process))

(defun fastrevert-process-query-on-exit-flag (process)
  "Return non-nil if Emacs asks before killing PROCESS at exit."
  (fastrevert--process-check process)
  (fastrevert--process-query-on-exit process))

(defun fastrevert-set-process-query-on-exit-flag (process flag)
  "Make Emacs ask before killing PROCESS at exit if FLAG is non-nil."
  (fastrevert--process-check process)
  (setf (fastrevert--process-query-on-exit process) flag))

(defvar fastrevert--not-running-says-why 'unknown
  "Whether this Emacs's error for a process that is not running says why.
Emacs 30 adds the status to \"Process NAME not running\"; earlier
versions do not.  Found out once, from a stock pipe process.")

(defun fastrevert--process-not-running (process)
  "Signal the error stock Emacs signals for sending to PROCESS, which has ended."
  (when (eq fastrevert--not-running-says-why 'unknown)
    (let ((probe (make-pipe-process :name " *fastrevert-probe*" :noquery t :buffer nil)))
      (delete-process probe)
      (setq fastrevert--not-running-says-why
            (condition-case error
                (progn (process-send-string probe "") nil)
              (error (and (stringp (cadr error))
                          (string-match-p " not running: " (cadr error))
                          t))))))
  (if fastrevert--not-running-says-why
      (error "Process %s not running: %s" (fastrevert--process-name process)
             (fastrevert--process-status-message process))
    (error "Process %s not running" (fastrevert--process-name process))))

(defun fastrevert-process-send-string (process string)
  "Send STRING to the standard input of PROCESS, encoded with its coding.
This never blocks: whatever the pipe does not take now is queued and
written as the child reads."
  (fastrevert--process-check process)
  (unless (stringp string) (signal 'wrong-type-argument (list 'stringp string)))
  (unless (fastrevert-process-live-p process)
    (fastrevert--process-not-running process))
  (fastrevert--mod-process-send
   (fastrevert--process-id process)
   (if (multibyte-string-p string)
       (encode-coding-string string (fastrevert--process-encoding process) t)
     string))
  nil)

(defun fastrevert-process-send-eof (process)
  "Close the standard input of PROCESS once all queued input is written.
Return PROCESS."
  (fastrevert--process-check process)
  (unless (fastrevert-process-live-p process)
    (fastrevert--process-not-running process))
  (fastrevert--mod-process-eof (fastrevert--process-id process))
  process)

(defun fastrevert-process-signal (process sigcode)
  "Send PROCESS the signal SIGCODE, a number or a name such as `SIGINT' or `int'.
The signal goes to the child's process group, as `kill-process' and
`interrupt-process' send it.  Return 0, or -1 when PROCESS has ended
or there is no such signal, as `signal-process' returns then."
  (fastrevert--process-check process)
  (let ((number (fastrevert--signal-number sigcode)))
    (if (or (not (fastrevert-process-live-p process))
            ;; What kill(2) refuses with EINVAL.
            (not (<= 0 number 64)))
        -1
      (fastrevert--mod-process-signal (fastrevert--process-id process) number)
      0)))

(defun fastrevert--process-kill-buffer ()
  "Send SIGHUP to the live processes that write to the current buffer.
Killing a buffer does so to its processes in stock Emacs.  Run from
`kill-buffer-hook'."
  (when (> (hash-table-count fastrevert--processes) 0)
    (let ((buffer (current-buffer))
          (hangup (fastrevert--mod-signal-number "HUP"))
          (targets nil))
      (maphash (lambda (_id process)
                 (when (eq (fastrevert--process-buffer process) buffer)
                   (push process targets)))
               fastrevert--processes)
      (dolist (process targets)
        (when (fastrevert-process-live-p process)
          (fastrevert--mod-process-signal (fastrevert--process-id process) hangup))))))

(add-hook 'kill-buffer-hook #'fastrevert--process-kill-buffer)

(defun fastrevert-delete-process (process)
  "Kill PROCESS, forget it and tell its sentinel, as `delete-process' does.
The sentinel gets \"killed\\n\" at once unless the process had already
ended; the child is reaped in the background."
  (fastrevert--process-check process)
  (let ((id (fastrevert--process-id process)))
    (when (eq (gethash id fastrevert--processes) process)
      (fastrevert--mod-process-remove id)
      (setf (fastrevert--process-status process) 'signal
            (fastrevert--process-exit-status process) 9)
      (fastrevert--process-finish process)))
  nil)

(defun fastrevert-accept-process-output (&optional process seconds millisec just-this-one)
  "Wait for output from PROCESS, as `accept-process-output' does.
PROCESS is a `fastrevert-process', or nil for output from any
fastrevert process.  SECONDS and MILLISEC bound the wait; without
them, wait until output arrives (or PROCESS has ended).
JUST-THIS-ONE non-nil runs no other process filters meanwhile, and
an integer runs no timers either.  Return non-nil if output (or
PROCESS's end) was handled.

The wait is native: the engine's results are taken as soon as they
are ready, not when Emacs's event loop next reads the engine's wake
pipe.  It happens in slices of `fastrevert--wait-slice' seconds; at
least that often, Emacs runs its timers and other processes' filters
as JUST-THIS-ONE allows, however busy the output.  Quitting
interrupts the wait."
  (when process (fastrevert--process-check process))
  (fastrevert--engine-ensure)
  (let* ((timeout (fastrevert--process-timeout seconds millisec))
         (deadline (and timeout (+ (float-time) timeout)))
         (id (and process (fastrevert--process-id process)))
         (start (if process (fastrevert--process-outputs process)
                  fastrevert--process-output-count)))
    (if (and process (not (eq (gethash id fastrevert--processes) process)))
        ;; Its end was handled before: only results already queued are.
        (progn (fastrevert--drain) nil)
      (fastrevert--wait-for
       (lambda ()
         (or (/= start (if process (fastrevert--process-outputs process)
                         fastrevert--process-output-count))
             (and process (not (eq (gethash id fastrevert--processes) process)))))
       deadline just-this-one))))

(defun fastrevert--process-timeout (seconds millisec)
  "Return the seconds SECONDS and MILLISEC bound a wait to, or nil for none.
As `accept-process-output' reads them: SECONDS a number, MILLISEC a
fixnum; a NaN or a negative total means no wait at all."
  (when (and seconds (not (numberp seconds)))
    (signal 'wrong-type-argument (list 'numberp seconds)))
  (when (and millisec (not (fixnump millisec)))
    (signal 'wrong-type-argument (list 'fixnump millisec)))
  (when (or seconds millisec)
    (let ((total (+ (or seconds 0) (/ (or millisec 0) 1000.0))))
      (if (or (isnan (float total)) (< total 0)) 0 total))))

(defun fastrevert-process-list ()
  "Return the live fastrevert processes."
  (let (processes stale)
    (maphash (lambda (id process)
               (if (fastrevert-process-live-p process)
                   (push process processes)
                 (push id stale)))
             fastrevert--processes)
    ;; Processes an engine restart killed never report an exit.
    (dolist (id stale)
      (let ((process (gethash id fastrevert--processes)))
        (fastrevert--process-memfd-close process)
        (fastrevert--process-forget process)))
    processes))

(defun fastrevert--process-kill-emacs-query ()
  "Ask before exiting while a fastrevert process that wants a query is live.
Return non-nil to let Emacs exit, with the question stock Emacs asks."
  (let ((active (cl-some (lambda (process)
                           (and (fastrevert--process-query-on-exit process)
                                (fastrevert-process-live-p process)))
                         (fastrevert-process-list))))
    (or (not active)
        (yes-or-no-p "Active processes exist; kill them and exit anyway? "))))

(add-hook 'kill-emacs-query-functions #'fastrevert--process-kill-emacs-query)

(defun fastrevert-process-unload-function ()
  "Kill every fastrevert process, for `unload-feature' of this library.
Their sentinels are told, and nothing that runs later (a hook, a
result of the engine) calls a function of this library any more.
Return nil, so that `unload-feature' goes on to remove the rest."
  (let (processes)
    (maphash (lambda (_id process) (push process processes)) fastrevert--processes)
    (dolist (process processes)
      (fastrevert-delete-process process)))
  (remove-hook 'kill-emacs-query-functions #'fastrevert--process-kill-emacs-query)
  (remove-hook 'kill-buffer-hook #'fastrevert--process-kill-buffer)
  (remove-hook 'fastrevert--engine-stopped-hook #'fastrevert--process-engine-stopped)
  (dolist (kind '(process-output process-exit process-error))
    (setf (alist-get kind fastrevert--record-handlers nil t) nil))
  nil)

(provide 'fastrevert-process)

;;; fastrevert-process.el ends here
