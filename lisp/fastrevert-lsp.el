;;; fastrevert-lsp.el --- Language servers on fastrevert's engine -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; Keywords: processes, languages

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; `fastrevert-lsp-mode' runs the connections of eglot (through
;; jsonrpc) and lsp-mode on fastrevert's engine, with no wrapper program
;; and no change to the user's server settings.
;;
;; The server stays a real Emacs process: Emacs starts it, so
;; `process-id', `kill-process', `delete-process', `list-processes', its
;; status and its sentinel are stock.  Only its standard input and
;; output change hands: they are named pipes in a private directory,
;; which the engine thread holds.  The engine reads the server's output
;; as it comes, so the server never waits on a full pipe while Emacs is
;; busy (up to `fastrevert-lsp-backlog'), frames it into whole
;; Content-Length messages, and hands the client's filter as many whole
;; messages at once as have arrived, never a piece of one.  What the
;; client sends is written at once as far as the pipe takes it; the rest
;; is queued in order and written by the engine, so that a send never
;; blocks Emacs.  The client's sentinel is told of the
;; server's end once all its output was delivered, as stock tells it.
;;
;; A server is started through /bin/sh, which connects the pipes and
;; then replaces itself with the server (exec), so the pid is the
;; server's.  `process-command' still gives the command the client
;; asked for.

;;; Code:

(require 'cl-lib)
(require 'fastrevert-process)

(declare-function fastrevert--mod-process-attach "fastrevert-module"
                  (id directory framing process backlog &optional json-style
                      file-threshold))
(declare-function fastrevert--mod-json-to-lisp "fastrevert-module" (json style))
(declare-function fastrevert--mod-lisp-file "fastrevert-module" (id token))
(declare-function fastrevert--mod-lisp-file-done "fastrevert-module" (id token))
(declare-function fastrevert--mod-process-ended "fastrevert-module" (id))

(defvar fastrevert-lsp-mode)

(defcustom fastrevert-lsp-backlog (* 128 1024 1024)
  "The most bytes of a language server's output that may wait for Emacs.
The engine reads a server's output while Emacs is busy, up to this
many bytes; past them the server waits on its full pipe, as it waits
at once with stock Emacs.  A message longer than this reaches the
client in pieces."
  :type 'natnum
  :group 'fastrevert)

(defcustom fastrevert-lsp-lisp-replies (< emacs-major-version 30)
  "Whether the engine turns a server's JSON messages into Lisp for the client.
When non-nil, the engine thread rewrites each message of a carried
server as the printed Lisp of what the client's `json-parse-buffer'
would make of it, and the client's parse becomes a `read' of that,
which costs Emacs 28 and 29 about half as much: the JSON is parsed off
the main thread.  The objects are the same (`equal'), save that ASCII
strings are unibyte.  Messages that would not give the same objects
\(a key twice in an object, a NUL in a string, numbers beyond what
`json-parse-buffer' takes, very deep nesting) stay JSON.  Emacs 30
parses JSON natively at least as fast as it reads Lisp, so the default
there is nil.

This takes effect for servers started afterwards, and needs a module
built with RapidJSON; without it the messages stay JSON."
  :type 'boolean
  :group 'fastrevert)

(defconst fastrevert-lsp--lisp-marker ";;fastrevert-lisp\n"
  "What begins a message that the engine turned into printed Lisp.
No JSON text begins so, and `read' skips it as a comment.")

(defconst fastrevert-lsp--file-marker
  ";;fastrevert-\\(lisp\\|json\\)-file \\([0-9]+\\) \\([0-9]+\\)\n"
  "What a message is when the engine put its body in a file.
The body is printed Lisp or JSON as the first group says; the numbers
are the engine's process id and the file's token.")

(defvar fastrevert-lsp--lisp-file-threshold (* 256 1024)
  "A message's body this long or longer goes to a file, not into the message.
The client's filter then gets a line instead of megabytes, and Emacs
parses (or reads, see `fastrevert-lsp-lisp-replies') the body from the
file in a buffer, without making a string of it, which would cost a
garbage collection of its own while the reply is handled.  Only for
clients known to parse with `json-parse-buffer'.  Nil keeps every
message whole.")

(defvar fastrevert-lsp--json-style nil
  "How the client that starts a server now parses its messages.
A list (OBJECT-TYPE NULL-OBJECT FALSE-OBJECT) of the arguments it
gives `json-parse-buffer', bound where the client is reached; nil
where they are not known, and the messages stay JSON.")

(cl-defstruct (fastrevert-lsp--link
               (:constructor fastrevert-lsp--link-create)
               (:copier nil))
  "How a server process that `fastrevert-lsp-mode' carries is wired."
  (record nil :documentation "The `fastrevert-process' that reads its output.")
  (command nil :documentation "The command the client started, a list of strings.")
  (directory nil :documentation "The private directory of its named pipes.")
  (sentinel nil :documentation "The client's sentinel.")
  (event nil :documentation "The event of its end, once Emacs has reported it.")
  (drained nil :documentation "Non-nil once all its output was delivered."))

(defvar fastrevert-lsp--lisp-read 0
  "How many messages were read as Lisp since Emacs started.")

(defvar fastrevert-lsp--lisp-files-read 0
  "How many messages were read or parsed from a file the engine wrote.")

(defvar fastrevert-lsp--carrying nil
  "Non-nil while a client starts a server that `fastrevert-lsp-mode' carries.
A list whose car is the symbol `carrying': the processes started
meanwhile are pushed onto its cdr.")

(defvar fastrevert-lsp--links 0
  "How many server processes are carried now.")

(defvar fastrevert-lsp--started 0
  "How many server processes were carried since Emacs started.")

(defconst fastrevert-lsp--script
  "exec 9>&1 <\"$1/in\" >\"$1/out\"%s || exit 126; rm -rf -- \"$1\"; shift; exec \"$@\""
  "The shell script that connects a server to its named pipes.
Its arguments are the directory of the pipes, the server's program
and the server's arguments.  %s is where standard error goes, when it
goes with standard output.  The server keeps the pipe that Emacs
made for its output open, as descriptor 9, and writes nothing to it:
Emacs would take that pipe's end of file while the server runs for a
pipe to read again at once, and spin.")

(defconst fastrevert-lsp--drain-timeout 1
  "Seconds to wait, after a server ended, for its output to end.
The output of a server ends as it exits, unless descendants of it
keep its standard output open: then the wait ends after this long,
and what they write later is dropped.")

(defun fastrevert-lsp--link (process)
  "Return the link of PROCESS if `fastrevert-lsp-mode' carries it, else nil."
  (and (processp process) (process-get process 'fastrevert-lsp)))

(defun fastrevert-lsp--carry-p (args)
  "Return the server's program file if the `make-process' ARGS are carried."
  (let ((command (plist-get args :command)))
    (and fastrevert-lsp--carrying
         (consp command)
         (cl-every #'stringp command)
         (if (plist-member args :connection-type)
             (eq (plist-get args :connection-type) 'pipe)
           (not process-connection-type))
         (not (and (plist-get args :file-handler)
                   (file-remote-p default-directory)))
         (file-executable-p "/bin/sh")
         (condition-case nil
             (progn (fastrevert--engine-ensure) t)
           (error nil))
         (executable-find (car command)))))

(defun fastrevert-lsp--forward (process bytes)
  "Hand BYTES, whole messages from the server of PROCESS, to its filter.
They are decoded as PROCESS's coding system says, as stock decodes
output for a filter.  Output goes on after Emacs reported the end of
PROCESS (which may have removed it from the process list), until the
client's sentinel is told, as stock reads what is left first."
  (when (fastrevert-lsp--link process)
    (let ((coding (car (process-coding-system process))))
      (funcall (process-filter process)
               process
               (if (or (null coding) (eq (coding-system-type coding) 'raw-text))
                   bytes
                 (decode-coding-string bytes coding t))))))

(defun fastrevert-lsp--finish (process link)
  "Tell the client's sentinel of PROCESS the end recorded in LINK."
  (when (process-get process 'fastrevert-lsp)
    (process-put process 'fastrevert-lsp nil)
    (setq fastrevert-lsp--links (max 0 (1- fastrevert-lsp--links)))
    (ignore-errors (delete-directory (fastrevert-lsp--link-directory link) t))
    (fastrevert-lsp--maybe-unadvise)
    (let ((sentinel (fastrevert-lsp--link-sentinel link)))
      (when sentinel
        (fastrevert--process-call "sentinel" sentinel process
                                  (fastrevert-lsp--link-event link))))))

(defun fastrevert-lsp--output-ended (process link)
  "Note that all of PROCESS's output was delivered, as LINK records."
  (setf (fastrevert-lsp--link-drained link) t)
  ;; Its end is told by `fastrevert-lsp--sentinel', which waits for
  ;; this.  Output that ends while the server runs was lost by the
  ;; engine (it was stopped, or gave the stream up): the server cannot
  ;; go on.
  (when (and (not (fastrevert-lsp--link-event link)) (process-live-p process))
    (kill-process process)))

(defun fastrevert-lsp--sentinel (process event)
  "Pass EVENT about PROCESS to the client, once its output is delivered.
As stock reads what a process left before it tells the sentinel of
its end, the output the server wrote before it ended is delivered
first: this waits for it (see `fastrevert-lsp--drain-timeout').  A
server killed with SIGKILL, as `delete-process' and `kill-process'
kill it, is told at once, and what it left is dropped, as stock
drops the output of a deleted process."
  (let ((link (fastrevert-lsp--link process)))
    (cond ((not link))
          ((process-live-p process)
           (let ((sentinel (fastrevert-lsp--link-sentinel link)))
             (when sentinel (funcall sentinel process event))))
          ((fastrevert-lsp--link-event link))
          (t
           (setf (fastrevert-lsp--link-event link) event)
           (let ((record (fastrevert-lsp--link-record link))
                 (deadline (+ (float-time) fastrevert-lsp--drain-timeout)))
             (fastrevert--mod-process-ended (fastrevert--process-id record))
             (unless (and (eq (process-status process) 'signal)
                          (eql (process-exit-status process) 9))
               (while (and (not (fastrevert-lsp--link-drained link))
                           (< (float-time) deadline))
                 (fastrevert-accept-process-output record 0.05 nil t)))
             (if (fastrevert-lsp--link-drained link)
                 (fastrevert-lsp--finish process link)
               (fastrevert-lsp--give-up process link)))))))

(defun fastrevert-lsp--remove-pipes-at-exit ()
  "Remove the named pipes of the carried servers as Emacs exits.
A server removes its directory once it has opened its pipes; one that
Emacs ends before then (it exits as the client starts it) would leave
the directory behind."
  (dolist (process (process-list))
    (let ((link (fastrevert-lsp--link process)))
      (when link
        (ignore-errors (delete-directory (fastrevert-lsp--link-directory link) t))))))

(defun fastrevert-lsp--give-up (process link)
  "Drop what is left of the output of PROCESS (see LINK) and tell its end."
  (let ((record (fastrevert-lsp--link-record link)))
    (when (eq (fastrevert--process-status record) 'run)
      (fastrevert--process-forget record)
      (setf (fastrevert--process-status record) 'signal)
      (fastrevert--mod-process-remove (fastrevert--process-id record))))
  (fastrevert-lsp--finish process link))

(defun fastrevert-lsp--take-sentinel (process)
  "Put the sentinel of PROCESS behind `fastrevert-lsp--sentinel'."
  (let ((link (fastrevert-lsp--link process))
        (sentinel (process-sentinel process)))
    (when (and link (not (eq sentinel #'fastrevert-lsp--sentinel)))
      (setf (fastrevert-lsp--link-sentinel link) sentinel)
      (set-process-sentinel process #'fastrevert-lsp--sentinel))))

(defun fastrevert-lsp--lisp-style ()
  "Return how the engine prints the messages of the server started now, or nil.
See `fastrevert-lsp-lisp-replies'."
  (and fastrevert-lsp-lisp-replies
       fastrevert-lsp--json-style
       (fboundp 'json-parse-buffer)
       (fastrevert--mod-json-to-lisp nil nil)
       fastrevert-lsp--json-style))

(defun fastrevert-lsp--read-lisp ()
  "Read the engine's printed Lisp of a message from the current buffer.
The engine labels the keys of a long message (#1=:key, then #1#),
which `read' takes only with `read-circle' on."
  (let ((read-circle t))
    (read (current-buffer))))

(defun fastrevert-lsp--read-reply (json-parse-buffer &rest args)
  "Read the message at point if the engine printed it as Lisp.
Otherwise call JSON-PARSE-BUFFER with ARGS, on the body the engine put
in a file if it did."
  (cond ((not (eq (char-after) ?\;)) (apply json-parse-buffer args))
        ((looking-at-p fastrevert-lsp--lisp-marker)
         (setq fastrevert-lsp--lisp-read (1+ fastrevert-lsp--lisp-read))
         (fastrevert-lsp--read-lisp))
        ((looking-at-p fastrevert-lsp--file-marker)
         ;; The parse leaves the client's match data as it was.
         (let (lisp id token)
           (save-match-data
             (looking-at fastrevert-lsp--file-marker)
             (setq lisp (equal (match-string 1) "lisp")
                   id (string-to-number (match-string 2))
                   token (string-to-number (match-string 3)))
             (goto-char (match-end 0)))
           (prog1 (fastrevert-lsp--read-file id token
                                             (and (not lisp) (cons json-parse-buffer args)))
             (when lisp (setq fastrevert-lsp--lisp-read (1+ fastrevert-lsp--lisp-read))))))
        (t (apply json-parse-buffer args))))

(defun fastrevert-lsp--read-file (id token parse)
  "Return the body in file TOKEN of engine process ID, and close the file.
PARSE nil reads the body as printed Lisp; otherwise it is a cons of
a FUNCTION and its ARGS, and FUNCTION parses the JSON body with ARGS.
The bytes go from the file into a unibyte buffer, with no string made
of them, and are not decoded: `json-parse-buffer' reads a unibyte
buffer as UTF-8, and gives what it gives for the decoded text, at a
tenth of the cost of decoding megabytes first."
  (unwind-protect
      (let ((fd (fastrevert--mod-lisp-file id token)))
        (unless fd
          (error "The engine no longer holds message %d of process %d" token id))
        (with-temp-buffer
          (let ((file-name-handler-alist nil)
                (inhibit-file-name-handlers t))
            (set-buffer-multibyte nil)
            (insert-file-contents-literally (fastrevert--memfd-file-name fd)))
          (goto-char (point-min))
          (prog1 (if parse (apply (car parse) (cdr parse)) (fastrevert-lsp--read-lisp))
            (setq fastrevert-lsp--lisp-files-read (1+ fastrevert-lsp--lisp-files-read)))))
    (fastrevert--mod-lisp-file-done id token)))

(defun fastrevert-lsp--start (make-process args program)
  "Start the server as MAKE-PROCESS would with ARGS, on named pipes.
PROGRAM is the server's program file."
  (let* ((command (plist-get args :command))
         (directory (make-temp-file "fastrevert-lsp" t))
         (id (fastrevert--process-new-id))
         (link (fastrevert-lsp--link-create :command command :directory directory))
         (name (plist-get args :name))
         process record)
    (condition-case err
        (progn
          (setq record (fastrevert--process-start-record
                        id (fastrevert--process-unique-name (format "%s" name)) command
                        nil nil nil nil
                        (lambda (_record bytes)
                          (when process (fastrevert-lsp--forward process bytes)))
                        (lambda (_record _event)
                          (when process (fastrevert-lsp--output-ended process link)))
                        'binary 'binary nil fastrevert--engine-generation))
          (setf (fastrevert-lsp--link-record link) record)
          (fastrevert--mod-process-attach id (fastrevert--process-encode-file directory)
                                          'lsp record (max 1 fastrevert-lsp-backlog)
                                          (fastrevert-lsp--lisp-style)
                                          (and fastrevert-lsp--json-style
                                               (fboundp 'json-parse-buffer)
                                               fastrevert-lsp--lisp-file-threshold))
          (puthash id record fastrevert--processes)
          (puthash (fastrevert--process-name record) record fastrevert--process-names)
          (let ((args (copy-sequence args)))
            (setq args (plist-put
                        args :command
                        (append (list "/bin/sh" "-c"
                                      (format fastrevert-lsp--script
                                              (if (plist-get args :stderr) "" " 2>&1"))
                                      "fastrevert-lsp" directory program)
                                (cdr command))))
            (setq process (apply make-process args))))
      ((debug error)
       (when record
         (fastrevert--process-forget record)
         (fastrevert--mod-process-remove id))
       (ignore-errors (delete-directory directory t))
       (signal (car err) (cdr err))))
    (process-put process 'fastrevert-lsp link)
    (add-hook 'kill-emacs-hook #'fastrevert-lsp--remove-pipes-at-exit)
    (setq fastrevert-lsp--links (1+ fastrevert-lsp--links)
          fastrevert-lsp--started (1+ fastrevert-lsp--started))
    (fastrevert-lsp--take-sentinel process)
    (setcdr fastrevert-lsp--carrying (cons process (cdr fastrevert-lsp--carrying)))
    process))

;;;; Where the processes are reached

(defun fastrevert-lsp--make-process (make-process &rest args)
  "Start a carried server if a client asks for one, else call MAKE-PROCESS.
ARGS are those of `make-process'."
  (let ((program (fastrevert-lsp--carry-p args)))
    (if program
        (fastrevert-lsp--start make-process args program)
      (apply make-process args))))

(defun fastrevert-lsp--encode (process string)
  "Return STRING as the bytes that PROCESS is sent, as stock encodes them."
  (if (multibyte-string-p string)
      (encode-coding-string string (or (cdr (process-coding-system process)) 'binary) t)
    string))

(defun fastrevert-lsp--input-id (process)
  "Return the engine's id for the input of carried PROCESS.
Signal the error stock signals when PROCESS no longer runs."
  (unless (process-live-p process)
    (error "Process %s not running" (process-name process)))
  (fastrevert--process-id (fastrevert-lsp--link-record (fastrevert-lsp--link process))))

(defun fastrevert-lsp--send (process bytes)
  "Queue BYTES for the server of carried PROCESS."
  (fastrevert--mod-process-send (fastrevert-lsp--input-id process) bytes))

(defun fastrevert-lsp--send-string (send-string process string)
  "Queue STRING for the server if PROCESS is carried, else call SEND-STRING."
  (if (fastrevert-lsp--link process)
      (progn (fastrevert-lsp--send process (fastrevert-lsp--encode process string)) nil)
    (funcall send-string process string)))

(defun fastrevert-lsp--send-region (send-region process start end)
  "Queue START to END for the server if PROCESS is carried, else call SEND-REGION."
  (if (fastrevert-lsp--link process)
      (progn (fastrevert-lsp--send process (fastrevert-lsp--encode
                                            process (buffer-substring-no-properties start end)))
             nil)
    (funcall send-region process start end)))

(defun fastrevert-lsp--send-eof (send-eof &optional process)
  "Close the server's input once sent if PROCESS is carried, else call SEND-EOF."
  (if (not (fastrevert-lsp--link process))
      (funcall send-eof process)
    (fastrevert--mod-process-eof (fastrevert-lsp--input-id process))
    process))

(defun fastrevert-lsp--command (process-command process)
  "Return the command the client started if PROCESS is carried.
Otherwise call PROCESS-COMMAND."
  (let ((link (fastrevert-lsp--link process)))
    (if link (fastrevert-lsp--link-command link) (funcall process-command process))))

(defconst fastrevert-lsp--process-advice
  '((process-send-string . fastrevert-lsp--send-string)
    (process-send-region . fastrevert-lsp--send-region)
    (process-send-eof . fastrevert-lsp--send-eof)
    (process-command . fastrevert-lsp--command))
  "What a carried process is reached through, besides its start.
Each advises the stock function, for carried processes only.")

(defun fastrevert-lsp--carry-workspace (start-workspace &rest args)
  "Call START-WORKSPACE with ARGS, carrying the server started there.
lsp-mode starts a workspace's server there, through the connect
function of the client's connection."
  (let ((fastrevert-lsp--json-style
         (list (if (bound-and-true-p lsp-use-plists) 'plist 'hash-table) nil nil)))
    (fastrevert-lsp--carry (lambda () (apply start-workspace args)))))

(defun fastrevert-lsp--advise ()
  "Reach carried processes through the stock process functions."
  (advice-add 'make-process :around #'fastrevert-lsp--make-process)
  (advice-add 'lsp--start-workspace :around #'fastrevert-lsp--carry-workspace)
  (pcase-dolist (`(,function . ,advice) fastrevert-lsp--process-advice)
    (advice-add function :around advice))
  ;; An Emacs built without JSON support lacks it, and its clients know.
  (when (fboundp 'json-parse-buffer)
    (advice-add 'json-parse-buffer :around #'fastrevert-lsp--read-reply)))

(defun fastrevert-lsp--maybe-unadvise ()
  "Remove the advice that only carried processes need, once none is left.
The start of new ones is advised only while the mode is on."
  (unless fastrevert-lsp-mode
    (advice-remove 'make-process #'fastrevert-lsp--make-process)
    (advice-remove 'lsp--start-workspace #'fastrevert-lsp--carry-workspace)
    (when (zerop fastrevert-lsp--links)
      (pcase-dolist (`(,function . ,advice) fastrevert-lsp--process-advice)
        (advice-remove function advice))
      (advice-remove 'json-parse-buffer #'fastrevert-lsp--read-reply))))

(defun fastrevert-lsp--carry (start)
  "Call START, carrying the local stdio servers started there; return its value.
Each carried process gets its sentinel put behind the mode's, once
the client has set it."
  (if (not fastrevert-lsp-mode)
      (funcall start)
    (let* ((fastrevert-lsp--carrying (list 'carrying))
           (carried fastrevert-lsp--carrying))
      (prog1 (funcall start)
        (mapc #'fastrevert-lsp--take-sentinel (cdr carried))))))

;;;; The clients

(with-eval-after-load 'jsonrpc
  ;; jsonrpc starts its process from the connection's initialization
  ;; (its :process initarg may be a function that starts it), and sets
  ;; the filter and sentinel there.
  (cl-defmethod initialize-instance :extra "fastrevert-lsp" :around
    ((_connection jsonrpc-process-connection) &optional _slots)
    "Carry the server that a jsonrpc connection starts, with `fastrevert-lsp-mode'."
    (let ((fastrevert-lsp--json-style '(plist nil :json-false)))
      (fastrevert-lsp--carry #'cl-call-next-method))))

;;;###autoload
(define-minor-mode fastrevert-lsp-mode
  "Toggle running language servers on fastrevert's engine.
With this global mode on, the eglot and lsp-mode connections that
start afterwards run on the engine: their server is a process that
Emacs starts, as stock starts it, but the engine thread reads and
writes its pipes.  The server never waits on Emacs while Emacs is
busy, up to `fastrevert-lsp-backlog' bytes of output; the client's
filter gets whole messages, as many at once as have come; and sends
never block Emacs.  Where `fastrevert-lsp-lisp-replies' says so, the
engine also parses the messages, for the client to read them as Lisp.
The client's settings (`eglot-server-programs', lsp-mode's clients)
do not change.

Servers on remote hosts (through Tramp), servers reached over TCP,
and servers started on a pseudo-terminal are not carried: they stay
stock.  Turning the mode off stops carrying new servers; those that
run go on as they are until they end."
  :global t
  :group 'fastrevert
  (if fastrevert-lsp-mode
      (condition-case err
          (progn (fastrevert--engine-ensure)
                 (fastrevert-lsp--advise))
        (error (setq fastrevert-lsp-mode nil)
               (signal (car err) (cdr err))))
    (fastrevert-lsp--maybe-unadvise)))

(defun fastrevert-lsp-unload-function ()
  "Turn `fastrevert-lsp-mode' off and remove its advice, for `unload-feature'.
Carried servers are killed first."
  (setq fastrevert-lsp-mode nil)
  (dolist (process (process-list))
    (when (fastrevert-lsp--link process) (delete-process process)))
  (setq fastrevert-lsp--links 0)
  (fastrevert-lsp--maybe-unadvise)
  (remove-hook 'kill-emacs-hook #'fastrevert-lsp--remove-pipes-at-exit)
  nil)

(provide 'fastrevert-lsp)

;;; fastrevert-lsp.el ends here
