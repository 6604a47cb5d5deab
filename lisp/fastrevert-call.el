;;; fastrevert-call.el --- A native drop-in for call-process -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; `fastrevert-call-process' takes the arguments of `call-process' and
;; returns what it returns.  While the child runs, Emacs waits natively
;; on its exit; how the output reaches the buffer follows its size and
;; pace.  Up to 16 KiB comes as one string, decoded and inserted.  A
;; longer output that the child wrote and closed is read by
;; `insert-file-contents' straight from the pipe into the buffer gap and
;; decoded there once: nothing is copied on the way and no Lisp string
;; is made.  Output that goes on goes through a memfd (an anonymous
;; in-memory file) in chunks of whole lines, each inserted with
;; `insert-file-contents' while the child writes the next.
;;
;; The call runs with quit inhibited, and the module takes each C-g from
;; `quit-flag' between the parts it hands over: Emacs keeps nothing of
;; an insert that a quit stops, and a quit can fall on any call into
;; Lisp before it begins.  Each part is a few MiB at most, so a C-g
;; waits little, and on a quit the module hands over all it has read,
;; cut after the last whole character: a C-g keeps at least what stock
;; `call-process' would have inserted by then.
;;
;; All policy (which coding system, which buffer, which error to
;; signal) is here and follows the stock primitive; the module spawns,
;; waits and reads.

;;; Code:

(require 'fastrevert-engine)
(require 'fastrevert-child)
(require 'fastrevert-decode)

(declare-function fastrevert--mod-call-process "fastrevert-module"
                  (program argv env cwd infile stdout stderr chunk cut))
(declare-function fastrevert--mod-process-start "fastrevert-module"
                  (id program argv env cwd stdin stdout stderr framing read-size
                      process decoding backlog))
(declare-function fastrevert--mod-strsignal "fastrevert-module" (signal))

(defun fastrevert--call-process-coding-args (program infile destination display args)
  "Return the arguments of `find-operation-coding-system' after its operation.
They are those of the call: PROGRAM, INFILE, DESTINATION, DISPLAY and
ARGS, as `call-process' passes them."
  (append (list 'call-process program infile destination display) args))

(defun fastrevert--call-process-coding (coding-args)
  "Return the coding system for output, as `call-process' chooses it.
CODING-ARGS are the arguments to `find-operation-coding-system'
after the operation.  Nil stands for `undecided'."
  (or coding-system-for-read
      (let ((systems (apply #'find-operation-coding-system coding-args)))
        (cond ((consp systems) (car systems))
              ((consp default-process-coding-system)
               (car default-process-coding-system))))))

(defun fastrevert--raw-text-coding (coding)
  "Return the `raw-text' variant of CODING, as `call-process' picks it.
A coding system of type `raw-text' (`no-conversion' included) is
its own variant; any other gets `raw-text' with its end-of-line
conversion."
  (if (eq (coding-system-type coding) 'raw-text)
      coding
    (let ((eol (coding-system-eol-type coding)))
      (if (vectorp eol)
          'raw-text
        (aref [raw-text-unix raw-text-dos raw-text-mac] eol)))))

(defconst fastrevert--call-process-chunk (* 64 1024)
  "Bytes of output to gather before inserting while the child still runs.
Inserting each such part as it arrives lets Emacs decode while the
child writes the next, as stock `call-process' does with its reads;
smaller parts would cost more calls than they save.")

(defun fastrevert--call-process-streamable-p (coding)
  "Return non-nil if output in CODING may be inserted in newline-ended chunks.
That holds for ASCII-compatible coding systems that keep no state
across lines and need no detection of the character encoding;
`undecided' is detected once, on the whole output."
  (and coding
       (memq (coding-system-type coding) '(utf-8 charset raw-text shift-jis big5))))

(defun fastrevert--call-process-cut (coding)
  "Return where output decoded with CODING may be cut, for the native call.
That is `utf-8' for UTF-8, `bytes' for raw bytes, where every byte is
a character, and nil otherwise: after a byte below 0x80 that is
neither a digit nor a carriage return, which ends a character in
every ASCII-compatible coding system."
  (pcase (and coding (not (eq coding 'undecided)) (coding-system-type coding))
    ('utf-8 'utf-8)
    ('raw-text 'bytes)))

(defun fastrevert--call-process-chunk-for (coding display)
  "Return the CHUNK argument of the native call for output in CODING.
With DISPLAY non-nil, every line as it arrives (1), which takes a
coding that can be cut at newlines.  Otherwise a coding that can be
cut gets `fastrevert--call-process-chunk': the module then reads a
child that writes faster than Emacs inserts in chunks, each decoded
while the child writes the next, and lets any other output longer
than a string's worth be read straight from the pipe into the
buffer.  A coding that cannot be cut gets 0: a long output is always
read straight from the pipe, and decoded once, whole."
  (cond ((not (fastrevert--call-process-streamable-p coding)) 0)
        (display 1)
        (t fastrevert--call-process-chunk)))

(defun fastrevert--insert-pipe (fd coding)
  "Insert the contents of the pipe FD, to its end, at point, decoded with CODING.
The pipe has no writer left, so the read ends at what it holds.
Return the number of bytes inserted, as the buffer holds them; point
ends after the text.  As for a memfd range,
`buffer-file-coding-system' is restored and no file name handler,
format decoder or after-insert function runs.
`last-coding-system-used' tells what `undecided' detected."
  (let ((start (point))
        (size (buffer-size))
        (saved-file-coding buffer-file-coding-system))
    (unwind-protect
        (let ((coding-system-for-read coding)
              (file-name-handler-alist nil)
              (after-insert-file-functions nil)
              (format-alist nil))
          (insert-file-contents (fastrevert--memfd-file-name fd)))
      (unless (eq buffer-file-coding-system saved-file-coding)
        (setq buffer-file-coding-system saved-file-coding)))
    (goto-char (+ start (- (buffer-size) size)))
    (- (position-bytes (point)) (position-bytes start))))

(defun fastrevert--call-process-insert (coding fd beg end)
  "Insert output at point, decoded with CODING.
CODING is what `fastrevert--call-process-coding' chose, nil standing for
`undecided'.  Called as (CODING FD BEG END) for consecutive byte ranges
of the memfd FD, as (CODING BYTES nil nil) with all of a short output
as a unibyte string, as (CODING FD nil nil) to read the pipe FD to its
end, or as (CODING nil nil nil) when there was no output.  Return the
coding system to decode the next range with (a coding system with parts
left to detect is fixed to what the first range detected, as
`call-process' fixes it after its first read), or, after a read of the
pipe, what `fastrevert--insert-pipe' returns.  Point ends after the
text, as `call-process' leaves it, and only what `call-process' itself
changes is changed: `buffer-file-coding-system', which
`insert-file-contents' would set, is restored, and no file name handler,
format decoder or after-insert function runs."
  (let ((decoding (if (and coding (not enable-multibyte-characters))
                      (fastrevert--raw-text-coding coding)
                    (or coding 'undecided))))
    (cond
     ((not fd)
      ;; No output: `call-process' still reports the coding system it
      ;; set up.
      (setq last-coding-system-used decoding))
     ((stringp fd)
      (insert (decode-coding-string fd decoding t))
      last-coding-system-used)
     ((not beg)
      (fastrevert--insert-pipe fd decoding))
     (t
      (fastrevert--insert-memfd-range fd beg end decoding)))))

(defun fastrevert--call-process-destination (destination)
  "Parse DESTINATION as `call-process' does.
Return (BUFFER OUTPUT-FILE STDERR) where BUFFER is nil, 0 or a live
buffer, OUTPUT-FILE an expanded file name or nil, and STDERR t,
nil or an expanded file name.  Buffers named by string are created."
  (let ((buffer destination)
        (stderr t)
        (output-file nil))
    (when (and (consp buffer) (not (eq (car buffer) :file)))
      (when (consp (cdr buffer))
        (let ((file (cadr buffer)))
          (setq stderr (if (memq file '(nil t)) file (expand-file-name file)))))
      (setq buffer (car buffer)))
    (when (and (consp buffer) (eq (car buffer) :file))
      (let ((file (if (consp (cdr buffer)) (cadr buffer) (cdr buffer))))
        (unless (stringp file) (signal 'wrong-type-argument (list 'stringp file)))
        (setq output-file (expand-file-name file)
              buffer nil)))
    (cond ((eq buffer t) (setq buffer (current-buffer)))
          ((or (null buffer) (integerp buffer)))
          (t (let ((spec buffer))
               (setq buffer (get-buffer-create buffer))
               (unless buffer (signal 'wrong-type-argument (list 'bufferp spec))))))
    (list buffer output-file stderr)))

;;;###autoload
(defun fastrevert-call-process (program &optional infile destination display &rest args)
  "Call PROGRAM synchronously in a separate process, natively.
A drop-in for `call-process': the arguments, the DESTINATION forms
and the return value are the same.  INFILE is the file to read the
input from (nil means the null device).  DESTINATION is t (the
current buffer), nil (discard), 0 (discard and do not wait), a buffer
or buffer name, (:file FILE), or (REAL-DESTINATION STDERR-FILE) with
STDERR-FILE nil (discard), t (mixed with the output) or a file name.
DISPLAY non-nil means redisplay as output is inserted: the output is
then inserted line by line as it arrives (in a coding system that
needs no detection; otherwise at the end).  ARGS are the program's
arguments.

The output is decoded with `coding-system-for-read', or else what
`process-coding-system-alist' or `default-process-coding-system'
give for `call-process'.  The child runs in `default-directory' with
`process-environment'.  A remote `default-directory' delegates to
`process-file'.  Quitting kills the child (SIGINT, then SIGKILL)
and signals `quit'.

Return the exit status, or a string describing the signal that
killed the program, or nil when DESTINATION is 0."
  (if (and (stringp default-directory)
           (find-file-name-handler default-directory 'process-file))
      (apply #'process-file program infile destination display args)
    (fastrevert--call-process-local program infile destination display args)))

(defun fastrevert--call-process-local (program infile destination display args)
  "Run PROGRAM with INFILE, DESTINATION, DISPLAY and ARGS, all local.
This is `fastrevert-call-process' once a file name handler is ruled out.
A short call costs as much here as in the child's own startup, so
what only an error needs (the files' messages) or only a coding
lookup needs (the operation's arguments) is made only then."
  ;; Stock call-process opens INFILE before it checks anything else.
  (let* ((infile (and infile (fastrevert--process-unquote
                              (expand-file-name infile (fastrevert--process-input-directory))))))
    (unless (stringp program) (signal 'wrong-type-argument (list 'stringp program)))
    (dolist (arg args)
      (unless (stringp arg) (signal 'wrong-type-argument (list 'stringp arg))))
    (when infile (fastrevert--process-check-readable infile))
    (pcase-let* ((`(,buffer ,output-file ,stderr) (fastrevert--call-process-destination
                                                   destination))
                 (dir (fastrevert--process-directory))
                 (encoded-path (fastrevert--process-find-program program))
                 (encoded-args
                  (if (or coding-system-for-write (cl-some #'multibyte-string-p args))
                      (fastrevert--process-encode-args
                       (fastrevert--call-process-coding-args program infile destination
                                                             display args)
                       args)
                    args))
                 (argv (vconcat (list encoded-path) encoded-args))
                 (env (fastrevert--process-environment dir))
                 (encoded-dir (fastrevert--process-encode-file dir))
                 (encoded-infile (and infile (fastrevert--process-encode-file infile)))
                 (encoded-output (and output-file (fastrevert--process-encode-file output-file)))
                 (encoded-stderr (if (stringp stderr) (fastrevert--process-encode-file stderr) stderr)))
      (if (integerp buffer)
          (fastrevert--call-process-detached
           encoded-path argv env encoded-dir encoded-infile encoded-stderr
           (fastrevert--call-process-files encoded-infile infile encoded-output output-file
                                           encoded-stderr stderr))
        (let* ((coding (and buffer
                            (or coding-system-for-read
                                (fastrevert--call-process-coding
                                 (fastrevert--call-process-coding-args
                                  program infile destination display args)))))
               (inserted nil)
               (stdout (cond (buffer
                              (lambda (fd beg end)
                                (setq inserted t)
                                (let ((value (with-current-buffer buffer
                                               (fastrevert--call-process-insert
                                                coding fd beg end))))
                                  (when display (redisplay))
                                  (if (or beg (stringp fd))
                                      (setq coding value)
                                    value))))
                             (encoded-output encoded-output)))
               ;; Standard error "mixed with the output" goes to the null
               ;; device when the output is discarded.
               (stderr-target (if (and (eq encoded-stderr t) (null stdout)) nil encoded-stderr))
               (chunk (fastrevert--call-process-chunk-for coding display))
               (cut (fastrevert--call-process-cut
                     (if (and buffer (not (buffer-local-value 'enable-multibyte-characters
                                                              buffer)))
                         'raw-text
                       coding)))
               ;; The module takes each C-g from `quit-flag' itself: a quit
               ;; that stopped an insert, or fell on a call into Lisp
               ;; before it began, would lose output already read.
               (result (let ((inhibit-quit t))
                         (fastrevert--mod-call-process
                          encoded-path argv env encoded-dir encoded-infile stdout stderr-target
                          chunk cut))))
          (cond
           ;; The common end: the child exited.
           ((integerp result)
            (when (and buffer (not inserted))
              (with-current-buffer buffer (fastrevert--call-process-insert coding nil nil nil)))
            result)
           ((eq (car result) :error)
            (fastrevert--process-raise
             result (fastrevert--call-process-files encoded-infile infile encoded-output
                                                    output-file encoded-stderr stderr)))
           (t
            (when (and buffer (not inserted))
              (with-current-buffer buffer (fastrevert--call-process-insert coding nil nil nil)))
            (pcase-let ((`(,how ,code) result))
              (if (fastrevert--exit-signaled-p how)
                  (decode-coding-string (or (fastrevert--mod-strsignal code) "unknown")
                                        (or locale-coding-system 'utf-8))
                code)))))))))

(defun fastrevert--call-process-files (encoded-infile infile encoded-output output-file
                                                       encoded-stderr stderr)
  "Return the files of a call with the messages stock gives when they fail.
ENCODED-INFILE, ENCODED-OUTPUT and ENCODED-STDERR are the encoded names
of INFILE, OUTPUT-FILE and STDERR; the value maps each encoded name to
\(MESSAGE . NAME), for `fastrevert--process-raise'."
  (list (cons encoded-infile (cons "Opening process input file" infile))
        (cons encoded-output (cons "Opening process output file" output-file))
        (cons encoded-stderr (cons "Cannot redirect stderr" stderr))))

(defun fastrevert--process-input-directory ()
  "Return the directory INFILE is expanded against, as stock does."
  (or (unhandled-file-name-directory default-directory) "~"))

(defun fastrevert--process-check-readable (file)
  "Signal what `call-process' signals when it cannot open FILE for input."
  (unless (file-readable-p file)
    (fastrevert--process-file-error
     (cond ((not (file-exists-p file)) 'ENOENT)
           (t 'EACCES))
     "Opening process input file" file)))

(defun fastrevert--call-process-detached (path argv env dir infile stderr files)
  "Start PATH with ARGV, ENV, DIR, INFILE and STDERR, and do not wait.
The engine reaps the child when it exits.  FILES maps the encoded
names to the stock messages.  Return nil, as `call-process' does
for DESTINATION 0."
  (fastrevert--engine-ensure)
  (let* ((id (fastrevert--process-new-id))
         (result (fastrevert--mod-process-start
                  id path argv env dir infile nil (if (stringp stderr) stderr nil) nil 4096
                  nil 'raw nil)))
    (when (eq (car-safe result) :error)
      (fastrevert--process-raise result files))
    nil))

(provide 'fastrevert-call)

;;; fastrevert-call.el ends here
