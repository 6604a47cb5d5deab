;;; fastrevert-remote.el --- Auto-revert of remote files, one watcher per connection -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; Stock auto-revert watches a remote file with one file-notification
;; process per buffer, each on a login of its own that Tramp opens on
;; the main thread, or polls it with one round trip per buffer per
;; tick, also on the main thread.  Either freezes Emacs for seconds
;; once there are a few remote buffers.
;;
;; Here each Tramp connection with remote buffers under auto-revert
;; gets one long-running watcher: a POSIX shell program
;; (`fastrevert-remote--script') on the remote host that watches the
;; buffers' directories with inotifywait, or fswatch, or else stats
;; their files every `auto-revert-interval'.  It prints one line per
;; change, "M MTIME SIZE NAME", and reads the set of files to watch on
;; its standard input, so that a buffer opened or killed changes the
;; set without a new login.
;;
;; Where Tramp shares its ssh connection (a ControlMaster socket), the
;; watcher is started by running ssh over that socket directly, as a
;; process whose output fastrevert's engine reads: starting it takes
;; no round trip on the main thread.  Otherwise Tramp starts it (see
;; `fastrevert-remote--start-through-tramp'), while the first buffer is
;; being opened, which already waits on Tramp.
;;
;; Handling a line costs a hash lookup and a string comparison, with
;; no Tramp call: a buffer is queued only when the line's MTIME and
;; SIZE differ from those of the version it holds.  A queued file
;; buffer asks the watcher for a copy of its file (only what was
;; appended, in tail mode), which comes in the same stream; then the
;; stock `auto-revert-handler' reverts it from that copy, visible
;; buffers first and yielding to input, with no round trip (see
;; fastrevert-remote-revert.el).  Other buffers, such as Dired's, are
;; reverted through Tramp, their stale predicate answered from the
;; line where it can be.
;;
;; When the connection drops, the watcher ends: that is reported once,
;; and a new watcher starts once Tramp has connected again, the tries
;; spaced by a growing delay.  Nothing here calls Tramp on a
;; connection that is not up.

;;; Code:

(require 'cl-lib)
(require 'autorevert)
(require 'fastrevert-engine)
(require 'fastrevert-batch)
(require 'fastrevert-remote-watcher)
(require 'fastrevert-remote-revert)

;; Tramp is loaded by then: a buffer is remote only once it has been.
(declare-function tramp-dissect-file-name "tramp" (name &optional nodefault))
(declare-function tramp-file-name-localname "tramp" (vec))
(declare-function tramp-sh-file-name-handler-p "tramp-sh" (vec))
(declare-function tramp-get-file-property "tramp-cache" (key file property &optional default))
(declare-function tramp-flush-file-properties "tramp-cache" (key file))

;; Defined in fastrevert.el, which loads this library.
(defvar fastrevert-mode)
(defvar fastrevert--stock-buffers)
(declare-function fastrevert--count "fastrevert" (counter &optional amount))

(defconst fastrevert-remote--retry-first 1.0
  "Seconds before the first try to start a watcher again after it ended.")

(defconst fastrevert-remote--retry-longest 60.0
  "The most seconds between two tries to start a watcher.")

(defconst fastrevert-remote--connected-check 1.0
  "Seconds between two looks at whether Tramp has connected again.
A look is local: it costs no round trip.")

;;;; Connections and the files they watch

(cl-defstruct (fastrevert-remote--conn
               (:constructor fastrevert-remote--conn-create (key host))
               (:copier nil))
  "One Tramp connection with remote buffers under auto-revert, and its watcher."
  (key nil :documentation "The connection's part of a file name, as `file-remote-p' gives it.")
  (host nil :documentation "The host, as messages name it.")
  (items (make-hash-table :test #'equal)
         :documentation "The files watched, by local name: each a `fastrevert-remote--item'.")
  (process nil :documentation "The watcher: a `fastrevert-process', a process, or nil.")
  (state 'stopped :documentation "`starting', `running', `down' or `stopped'.
`down' means the watcher ended unasked; a new one is to be started.")
  (mode nil :documentation "How the watcher was asked to watch: `notify' or `poll'.")
  (interval nil :documentation "The poll interval the watcher was started with.")
  (watching nil :documentation "How the watcher watches, from its greeting.")
  (sent (make-hash-table :test #'equal)
        :documentation "The local names the watcher was told to watch.")
  (partial "" :documentation "The start of an incomplete line of output.")
  (flush-timer nil :documentation "Timer that tells the watcher of new files, or nil.")
  (retry-timer nil :documentation "Timer of the next look at starting a watcher, or nil.")
  (retry-delay 0.0 :documentation "Seconds to wait before the next try after a failed one.")
  (next-try 0.0 :documentation "The `float-time' before which no new try starts.")
  (reported nil :documentation "Non-nil once the watcher's end has been reported.")
  (ready nil :documentation "Non-nil once the watcher has its program.
Until then, nothing else is sent to it.")
  (copies nil :documentation "Non-nil if the watcher sends copies of files.")
  (copy-id 0 :documentation "The number of the last copy asked for.")
  (asked (make-hash-table :test #'eql)
         :documentation "The copies asked for, by number: each (BUFFER STATE BASE).")
  (receiving nil :documentation "The copy being received: (ID BUFFER STATE BASE), or nil.")
  (chunks nil :documentation "The lines of the copy being received, last first."))

(cl-defstruct (fastrevert-remote--item
               (:constructor fastrevert-remote--item-create (name))
               (:copier nil))
  "One watched remote file (or directory) and the buffers that show it."
  (name nil :documentation "The local name on the remote host.")
  (state nil :documentation "\"MTIME SIZE\" from the watcher's last line, or nil.")
  (buffers nil :documentation "The live buffers that watch it."))

(defvar fastrevert-remote--conns (make-hash-table :test #'equal)
  "The connections with watched files, by the key of `fastrevert-remote--conn'.")

(defvar fastrevert-remote--pending (make-hash-table :test #'eq)
  "Remote buffers whose file changed, waiting to be checked.")

(defvar fastrevert-remote--check-timer nil
  "Timer that checks the pending remote buffers, or nil.")

(defvar-local fastrevert-remote--applied nil
  "The \"MTIME SIZE\" of the version of its file this buffer holds.
The symbol `unknown' until the watcher's first line is compared with
what the buffer read; nil when the buffer is not watched here.")
(put 'fastrevert-remote--applied 'permanent-local t)

(defvar-local fastrevert-remote--known nil
  "What the buffer knew of its file when it was first watched here.
A cons (SECONDS . SIZE): the whole seconds of its visited modification
time, and the size, if Tramp's cache knew it, or nil.")
(put 'fastrevert-remote--known 'permanent-local t)

(defvar-local fastrevert-remote--fetching nil
  "Non-nil while a copy of this buffer's remote file is being fetched.")
(put 'fastrevert-remote--fetching 'permanent-local t)

(defvar-local fastrevert-remote--copy-ready nil
  "A copy of this buffer's remote file waiting to be read, or nil.
A list (STATE BASE COPY OK): the watcher's state of the file it was
asked for, the byte it starts from, the local file holding it, and
whether the file could be read.")
(put 'fastrevert-remote--copy-ready 'permanent-local t)

(defvar fastrevert-remote--counters
  (list :remote-watchers-started 0 :remote-lines 0 :remote-reverts 0
        :remote-line-ms 0.0 :remote-check-ms 0.0)
  "Counters of the remote watchers; see `fastrevert-remote-stats'.")

(defvar fastrevert-remote--longest-line-handling 0.0
  "The most seconds one batch of a watcher's output took to handle.")

(defun fastrevert-remote--count (counter amount)
  "Add AMOUNT to COUNTER of `fastrevert-remote--counters'."
  (cl-incf (plist-get fastrevert-remote--counters counter) amount))

(defun fastrevert-remote-stats ()
  "Return a plist of the remote watchers' counters.
`:remote-watchers' is how many run now, `:remote-watchers-started' how
many were started, `:remote-lines' the lines of their output handled,
`:remote-reverts' the remote buffers reverted; `:remote-line-ms' and
`:remote-check-ms' the milliseconds the main thread spent handling
their output and checking (and reverting) buffers."
  (let ((running 0))
    (maphash (lambda (_ conn)
               (when (eq (fastrevert-remote--conn-state conn) 'running)
                 (setq running (1+ running))))
             fastrevert-remote--conns)
    (append (list :remote-watchers running) (copy-sequence fastrevert-remote--counters))))

(defun fastrevert-remote--descriptor-p (descriptor)
  "Return non-nil if DESCRIPTOR is a watch of a remote watcher.
That is (fastrevert-remote . KEY), KEY naming the connection."
  (eq (car-safe descriptor) 'fastrevert-remote))

;;;; Which buffers are watched here

(defun fastrevert-remote--target ()
  "Return the remote file or directory to watch for the current buffer, or nil.
That is the visited file, or the directory of a non-file buffer that
reverts by notification (as Dired does), when it is remote, remote
files are to be reverted (`auto-revert-remote-files'), and its Tramp
method runs processes through a POSIX shell (as ssh, scp, rsync, sudo,
su and the container methods do; not ftp, smb or dav)."
  (let ((name (cond (buffer-file-name buffer-file-name)
                    ((and buffer-auto-revert-by-notification default-directory)
                     (directory-file-name default-directory)))))
    (when (and name auto-revert-remote-files (file-remote-p name))
      (let ((file (expand-file-name name)))
        (and (fastrevert-remote--supported-p file) file)))))

(defun fastrevert-remote--supported-p (file)
  "Return non-nil if FILE's Tramp method can run processes through a shell."
  (and (featurep 'tramp-sh)
       (ignore-errors (tramp-sh-file-name-handler-p (tramp-dissect-file-name file)))))

(defun fastrevert-remote--mode ()
  "Return how watchers should watch: `notify', or `poll' as stock would poll.
Stock polls when `auto-revert-use-notify' is nil; for a remote
directory matching `auto-revert-notify-exclude-dir-regexp' too, which
is decided per connection here."
  (if auto-revert-use-notify 'notify 'poll))

(defun fastrevert-remote--connection-mode (key)
  "Return how the watcher of the connection KEY should watch."
  (if (or (eq (fastrevert-remote--mode) 'poll)
          (string-match-p auto-revert-notify-exclude-dir-regexp (concat key "/")))
      'poll
    'notify))

(defun fastrevert-remote-adopt ()
  "Watch the current buffer through its connection's watcher, if it fits.
Return non-nil if the buffer is watched here.  A buffer watched here
that no longer fits (auto-revert off, `auto-revert-remote-files' nil,
another file visited) is released first."
  (let ((file (and (auto-revert-active-p) (fastrevert-remote--target)))
        (descriptor auto-revert-notify-watch-descriptor))
    (when (and (fastrevert-remote--descriptor-p descriptor)
               (not (and file (equal (fastrevert-remote--buffer-file) file))))
      (fastrevert-remote-release)
      (setq descriptor nil))
    (cond ((null file) nil)
          ((fastrevert-remote--descriptor-p descriptor) t)
          (t
           (when descriptor
             ;; A stock watch from before; this one replaces it.
             (ignore-errors (file-notify-rm-watch descriptor))
             (setq auto-revert-notify-watch-descriptor nil))
           (fastrevert-remote--register file)
           t))))

(defvar-local fastrevert-remote--file nil
  "The remote file or directory this buffer is watched for.")
(put 'fastrevert-remote--file 'permanent-local t)

(defun fastrevert-remote--buffer-file ()
  "Return the remote file the current buffer is watched for, or nil."
  (and (fastrevert-remote--descriptor-p auto-revert-notify-watch-descriptor)
       fastrevert-remote--file))

(defun fastrevert-remote--known-size (file)
  "Return FILE's size if Tramp's cache has it, else nil; no round trip.
The attributes Tramp read while visiting FILE are cached under a name
that depends on Tramp's version."
  (ignore-errors
    (let ((vec (tramp-dissect-file-name file))
          (remote-file-name-inhibit-cache nil))
      (cl-some (lambda (property)
                 (let ((attributes (tramp-get-file-property
                                    vec (tramp-file-name-localname vec) property nil)))
                   (and (consp attributes) (integerp (nth 7 attributes)) (nth 7 attributes))))
               '("file-attributes-integer" "file-attributes")))))

(defun fastrevert-remote--register (file)
  "Watch FILE, which the current buffer visits or lists, on its connection."
  (let* ((key (file-remote-p file))
         (conn (or (gethash key fastrevert-remote--conns)
                   (puthash key (fastrevert-remote--conn-create
                                 key (or (file-remote-p file 'host) key))
                            fastrevert-remote--conns)))
         (name (file-local-name file))
         (items (fastrevert-remote--conn-items conn))
         (item (or (gethash name items)
                   (puthash name (fastrevert-remote--item-create name) items)))
         (modtime (visited-file-modtime)))
    (push (current-buffer) (fastrevert-remote--item-buffers item))
    (setq auto-revert-notify-watch-descriptor (cons 'fastrevert-remote key)
          auto-revert-notify-modified-p nil
          fastrevert-remote--file file
          fastrevert-remote--applied 'unknown
          fastrevert-remote--known
          (cons (and (not (numberp modtime)) (floor (float-time modtime)))
                (and buffer-file-name (not auto-revert-tail-mode)
                     (fastrevert-remote--known-size file))))
    (setq fastrevert--stock-buffers (delq (current-buffer) fastrevert--stock-buffers))
    (when (fastrevert-remote--item-state item)
      (fastrevert-remote--compare (current-buffer) item))
    (if (eq (fastrevert-remote--conn-state conn) 'stopped)
        ;; The connection's first buffer: its watcher starts while the
        ;; buffer is being opened, which waits on Tramp already.
        (fastrevert-remote--flush conn)
      (fastrevert-remote--schedule-flush conn))))

(defun fastrevert-remote-release ()
  "Stop watching the current buffer's remote file, if it is watched here."
  (when (fastrevert-remote--descriptor-p auto-revert-notify-watch-descriptor)
    (let* ((conn (gethash (cdr auto-revert-notify-watch-descriptor) fastrevert-remote--conns))
           (name (and fastrevert-remote--file (file-local-name fastrevert-remote--file)))
           (item (and conn name (gethash name (fastrevert-remote--conn-items conn)))))
      (when item
        (setf (fastrevert-remote--item-buffers item)
              (delq (current-buffer) (fastrevert-remote--item-buffers item)))
        (unless (fastrevert-remote--item-buffers item)
          (remhash name (fastrevert-remote--conn-items conn))))
      (when conn (fastrevert-remote--schedule-flush conn))
      (remhash (current-buffer) fastrevert-remote--pending)
      (fastrevert-remote--drop-copy)
      (setq fastrevert-remote--fetching nil)
      (setq auto-revert-notify-watch-descriptor nil
            auto-revert-notify-modified-p nil
            fastrevert-remote--file nil
            fastrevert-remote--applied nil
            fastrevert-remote--known nil))))

(defun fastrevert-remote--schedule-flush (conn)
  "Tell CONN's watcher of its changed set of files soon, starting it if need be.
Buffers opened or killed together make one change of the set."
  (unless (fastrevert-remote--conn-flush-timer conn)
    (setf (fastrevert-remote--conn-flush-timer conn)
          (run-at-time 0 nil #'fastrevert-remote--flush conn))))

(defun fastrevert-remote--flush (conn)
  "Bring CONN's watcher in step with its set of files.
With no file left, the watcher is stopped; with files and no watcher,
one is started; a watcher whose mode or interval no longer fits the
settings is replaced."
  (setf (fastrevert-remote--conn-flush-timer conn) nil)
  (let ((key (fastrevert-remote--conn-key conn)))
    (cond ((zerop (hash-table-count (fastrevert-remote--conn-items conn)))
           (fastrevert-remote--stop conn)
           (remhash key fastrevert-remote--conns))
          ((and (memq (fastrevert-remote--conn-state conn) '(starting running))
                (or (not (eq (fastrevert-remote--conn-mode conn)
                             (fastrevert-remote--connection-mode key)))
                    (and (eq (fastrevert-remote--conn-mode conn) 'poll)
                         (not (equal (fastrevert-remote--conn-interval conn)
                                     auto-revert-interval)))))
           (fastrevert-remote--stop conn)
           (fastrevert-remote--try-start conn))
          ((memq (fastrevert-remote--conn-state conn) '(starting running))
           (fastrevert-remote--send-changes conn))
          ((eq (fastrevert-remote--conn-state conn) 'stopped)
           (fastrevert-remote--try-start conn)))))

(defun fastrevert-remote--send-changes (conn)
  "Send CONN's watcher the files added to and removed from its set.
A watcher that has not got its program yet gets them with it."
  (let ((sent (fastrevert-remote--conn-sent conn))
        (items (fastrevert-remote--conn-items conn))
        (lines nil))
    (maphash (lambda (name _)
               (unless (gethash name items)
                 (push (concat "-" name "\n") lines)))
             sent)
    (maphash (lambda (name _)
               (unless (gethash name sent)
                 (push (concat "+" name "\n") lines)))
             items)
    (when (and lines (fastrevert-remote--conn-ready conn))
      (dolist (line lines)
        (let ((name (substring line 1 -1)))
          (if (eq (aref line 0) ?+) (puthash name t sent) (remhash name sent))))
      (fastrevert-remote--send conn (apply #'concat (nconc lines (list ".\n")))))))

(defun fastrevert-remote--send (conn string)
  "Send STRING to CONN's watcher."
  (fastrevert-remote-watcher-send (fastrevert-remote--conn-process conn) string))

;;;; Starting and stopping watchers

(defun fastrevert-remote--connected-p (conn)
  "Return non-nil if Tramp's connection for CONN is up; no round trip."
  (fastrevert-remote-watcher-connected-p (fastrevert-remote--conn-key conn)))

(defun fastrevert-remote--try-start (conn)
  "Start a watcher for CONN now if Tramp is connected, else look again later.
Nothing here opens a connection: a watcher starts only on one that
Tramp has open."
  (cond ((not (fastrevert-remote--connected-p conn))
         (setf (fastrevert-remote--conn-state conn) 'down)
         (fastrevert-remote--schedule-retry conn fastrevert-remote--connected-check))
        ((fastrevert-remote-tramp-busy-p)
         ;; Run from inside a wait of Tramp's, which starting a watcher
         ;; through Tramp would enter again: soon after.
         (setf (fastrevert-remote--conn-state conn) 'down)
         (fastrevert-remote--schedule-retry conn 0.2))
        ((< (float-time) (fastrevert-remote--conn-next-try conn))
         (setf (fastrevert-remote--conn-state conn) 'down)
         (fastrevert-remote--schedule-retry
          conn (- (fastrevert-remote--conn-next-try conn) (float-time))))
        (t
         (condition-case err
             (fastrevert-remote--start conn)
           (error
            (fastrevert-remote--ended conn (error-message-string err)))))))

(defun fastrevert-remote--schedule-retry (conn seconds)
  "Look at starting CONN's watcher again in SECONDS."
  (let ((timer (fastrevert-remote--conn-retry-timer conn)))
    (when (timerp timer) (cancel-timer timer)))
  (setf (fastrevert-remote--conn-retry-timer conn)
        (run-at-time (max 0.05 seconds) nil #'fastrevert-remote--retry conn)))

(defun fastrevert-remote--retry (conn)
  "Start CONN's watcher if it is still wanted and Tramp is connected."
  (setf (fastrevert-remote--conn-retry-timer conn) nil)
  (when (and (eq (gethash (fastrevert-remote--conn-key conn) fastrevert-remote--conns) conn)
             (eq (fastrevert-remote--conn-state conn) 'down))
    (fastrevert-remote--try-start conn)))

(defun fastrevert-remote--start (conn)
  "Start a watcher for CONN, and send it every file to watch."
  (let ((key (fastrevert-remote--conn-key conn))
        (mode (fastrevert-remote--connection-mode (fastrevert-remote--conn-key conn))))
    (setf (fastrevert-remote--conn-mode conn) mode
          (fastrevert-remote--conn-interval conn) auto-revert-interval
          (fastrevert-remote--conn-watching conn) nil
          (fastrevert-remote--conn-partial conn) ""
          (fastrevert-remote--conn-ready conn) nil
          (fastrevert-remote--conn-state conn) 'starting)
    (clrhash (fastrevert-remote--conn-sent conn))
    (let ((process (car (fastrevert-remote-watcher-start
                         key (fastrevert-remote--conn-host conn)
                         (lambda (process output)
                           (when (eq process (fastrevert-remote--conn-process conn))
                             (fastrevert-remote--output conn output)))
                         (lambda (process reason)
                           (when (eq process (fastrevert-remote--conn-process conn))
                             (fastrevert-remote--ended conn reason)))))))
      (setf (fastrevert-remote--conn-process conn) process)
      (fastrevert-remote--count :remote-watchers-started 1)
(fastrevert-remote--send-changes conn))))

(defun fastrevert-remote--stop (conn)
  "Stop CONN's watcher and its timers."
  (let ((process (fastrevert-remote--conn-process conn)))
    (setf (fastrevert-remote--conn-state conn) 'stopped
          (fastrevert-remote--conn-process conn) nil)
    (dolist (timer (list (fastrevert-remote--conn-retry-timer conn)
                         (fastrevert-remote--conn-flush-timer conn)))
      (when (timerp timer) (cancel-timer timer)))
    (setf (fastrevert-remote--conn-retry-timer conn) nil
          (fastrevert-remote--conn-flush-timer conn) nil)
    (clrhash (fastrevert-remote--conn-sent conn))
    (fastrevert-remote--drop-copies conn)
    (fastrevert-remote-watcher-kill process)))

(defun fastrevert-remote-stop-all ()
  "Stop every remote watcher, for `fastrevert-mode' turned off."
  (maphash (lambda (_ conn) (fastrevert-remote--stop conn)) fastrevert-remote--conns)
  (clrhash fastrevert-remote--conns)
  (clrhash fastrevert-remote--pending)
  (when (timerp fastrevert-remote--check-timer)
    (cancel-timer fastrevert-remote--check-timer))
  (setq fastrevert-remote--check-timer nil))

(defun fastrevert-remote--ended (conn reason)
  "Note that CONN's watcher ended unasked, for REASON; start another later.
The end is reported once, naming the host; the next try waits for
Tramp to be connected, and each failed try doubles the wait before
the next, up to `fastrevert-remote--retry-longest' seconds."
  (let* ((process (fastrevert-remote--conn-process conn))
         (errors (and process (fastrevert-remote-watcher-stderr process))))
    (setf (fastrevert-remote--conn-process conn) nil
          (fastrevert-remote--conn-state conn) 'down)
    (fastrevert-remote--drop-copies conn)
    (fastrevert-remote-watcher-kill process)
    (unless (fastrevert-remote--conn-reported conn)
      (setf (fastrevert-remote--conn-reported conn) t)
      (message "fastrevert: the watcher of remote files on %s ended (%s)%s; \
it restarts once Tramp is connected again"
               (fastrevert-remote--conn-host conn) reason
               (if (member errors '(nil "")) "" (format ": %s" errors))))
    (let ((delay (min fastrevert-remote--retry-longest
                      (max fastrevert-remote--retry-first
                           (* 2 (fastrevert-remote--conn-retry-delay conn))))))
      (setf (fastrevert-remote--conn-retry-delay conn) delay
            (fastrevert-remote--conn-next-try conn) (+ (float-time) delay))
      (fastrevert-remote--schedule-retry conn fastrevert-remote--connected-check))))

;;;; What a watcher prints

(defun fastrevert-remote--output (conn output)
  "Handle OUTPUT of CONN's watcher, complete lines and perhaps a partial one."
  (let ((start (float-time))
        (text (concat (fastrevert-remote--conn-partial conn) output))
        (from 0)
        (lines 0))
    (save-match-data
      (let (end)
        (while (setq end (string-search "\n" text from))
          (fastrevert-remote--line conn (substring text from end))
          (setq from (1+ end)
                lines (1+ lines)))))
    (setf (fastrevert-remote--conn-partial conn) (substring text from))
    (let ((spent (- (float-time) start)))
      (setq fastrevert-remote--longest-line-handling
            (max fastrevert-remote--longest-line-handling spent))
      (fastrevert-remote--count :remote-lines lines)
      (fastrevert-remote--count :remote-line-ms (* 1000 spent)))))

(defun fastrevert-remote--line (conn line)
  "Handle one LINE of CONN's watcher."
  (cond ((fastrevert-remote--conn-receiving conn)
         (fastrevert-remote--copy-line conn line))
        ((string-prefix-p "M " line)
         (fastrevert-remote--state-line conn line))
        ((and (member line '("S" "S\r")) (not (fastrevert-remote--conn-ready conn)))
         (fastrevert-remote-watcher-send-program (fastrevert-remote--conn-process conn)
                                                 (fastrevert-remote--conn-mode conn)
                                                 (fastrevert-remote--conn-interval conn))
         (setf (fastrevert-remote--conn-ready conn) t)
         (fastrevert-remote--send-changes conn))
        ((string-match "\\`D \\([0-9]+\\)" line)
         (let* ((id (string-to-number (match-string 1 line)))
                (asked (gethash id (fastrevert-remote--conn-asked conn))))
           (remhash id (fastrevert-remote--conn-asked conn))
           (setf (fastrevert-remote--conn-receiving conn) (cons id asked)
                 (fastrevert-remote--conn-chunks conn) nil)))
        ((string-match "\\`H \\([0-9]+\\) \\([a-z]+\\) ?\\([a-z]*\\)" line)
         (setf (fastrevert-remote--conn-copies conn) (equal (match-string 3 line) "copies"))
         (fastrevert-remote--greeted conn (match-string 2 line)))))

(defun fastrevert-remote--state-line (conn line)
  "Handle LINE, \"M MTIME SIZE NAME\" from CONN's watcher.
The buffers of NAME are compared with the new state if it is new; the
fields are found by position, which costs less than a regexp."
  (let* ((space (string-search " " line 2))
         (next (and space (string-search " " line (1+ space)))))
    (when next
      (let* ((end (if (eq (aref line (1- (length line))) ?\r) (1- (length line)) (length line)))
             (item (gethash (substring line (1+ next) end)
                            (fastrevert-remote--conn-items conn))))
        (when item
          (let ((state (substring line 2 next)))
            (unless (equal state (fastrevert-remote--item-state item))
              (setf (fastrevert-remote--item-state item) state)
              (dolist (buffer (fastrevert-remote--item-buffers item))
                (fastrevert-remote--compare buffer item)))))))))

(defun fastrevert-remote--greeted (conn watching)
  "Note that CONN's watcher has started, WATCHING as it told.
Every buffer whose file changed while no watcher ran is checked once
the watcher's first lines tell so."
  (setf (fastrevert-remote--conn-state conn) 'running
        (fastrevert-remote--conn-watching conn) watching
        (fastrevert-remote--conn-retry-delay conn) 0.0
        (fastrevert-remote--conn-reported conn) nil)
  (let ((timer (fastrevert-remote--conn-retry-timer conn)))
    (when (timerp timer) (cancel-timer timer)))
  (setf (fastrevert-remote--conn-retry-timer conn) nil)
  (maphash (lambda (_ item)
             (dolist (buffer (fastrevert-remote--item-buffers item))
               (fastrevert-remote--compare buffer item)))
           (fastrevert-remote--conn-items conn)))

;;;; Checking and reverting buffers

(defun fastrevert-remote--holds-p (buffer state)
  "Return non-nil if BUFFER, first watched here, has the version STATE names.
STATE is \"MTIME SIZE\" from the watcher.  The buffer knows its file's
modification time in whole seconds, as Tramp read it, and perhaps its
size; a tail-mode buffer knows how much of the file it has."
  (let* ((fields (split-string state " "))
         (mtime (car fields))
         (size (and (not (equal (cadr fields) "-")) (string-to-number (cadr fields))))
         (known (buffer-local-value 'fastrevert-remote--known buffer)))
    (cond ((equal mtime "-") t)
          ((buffer-local-value 'auto-revert-tail-mode buffer)
           (eql size (buffer-local-value 'auto-revert-tail-pos buffer)))
          (t (and (eql (car known) (truncate (string-to-number mtime)))
                  (or (null (cdr known)) (eql (cdr known) size)))))))

(defun fastrevert-remote--compare (buffer item)
  "Queue BUFFER's check if the version of ITEM's file it has is not the last."
  (let ((state (fastrevert-remote--item-state item))
        (applied (buffer-local-value 'fastrevert-remote--applied buffer)))
    (cond ((or (null state) (equal applied state)))
          ((and (eq applied 'unknown) (fastrevert-remote--holds-p buffer state))
           (with-current-buffer buffer
             (setq fastrevert-remote--applied state)))
          (t
           (puthash buffer t fastrevert-remote--pending)
           (fastrevert-remote--schedule-check)))))

(defun fastrevert-remote--schedule-check ()
  "Check the pending remote buffers soon."
  (unless fastrevert-remote--check-timer
    (setq fastrevert-remote--check-timer
          (run-at-time 0 nil #'fastrevert-remote--check-pending))))

(defun fastrevert-remote--check-pending ()
  "Check every pending remote buffer, visible ones first.
When `auto-revert-stop-on-user-input' is non-nil, stop at pending
input and go on once Emacs is idle.  While Tramp waits on a
connection, they wait."
  (setq fastrevert-remote--check-timer nil)
  (let ((start (float-time)))
    (unwind-protect
        (if (fastrevert-remote-tramp-busy-p)
            ;; Run from inside a wait of Tramp's, which a revert through
            ;; Tramp would enter again: later.
            (setq fastrevert-remote--check-timer
                  (run-at-time 0.1 nil #'fastrevert-remote--check-pending))
          (save-match-data
            (fastrevert--work-through fastrevert-remote--pending #'fastrevert-remote--check
                                      "fastrevert: reverting remote buffers...")))
      (fastrevert-remote--count :remote-check-ms (* 1000 (- (float-time) start)))
      (when (and (> (hash-table-count fastrevert-remote--pending) 0)
                 (not fastrevert-remote--check-timer))
        (setq fastrevert-remote--check-timer
              (run-with-idle-timer 0 nil #'fastrevert-remote--check-pending))))))

(defun fastrevert-remote--buffer-conn-item ()
  "Return (CONN . ITEM) of the current buffer, or nil if it is not watched here."
  (let* ((descriptor auto-revert-notify-watch-descriptor)
         (conn (and (fastrevert-remote--descriptor-p descriptor)
                    (gethash (cdr descriptor) fastrevert-remote--conns)))
         (item (and conn fastrevert-remote--file
                    (gethash (file-local-name fastrevert-remote--file)
                             (fastrevert-remote--conn-items conn)))))
    (and item (cons conn item))))

(defun fastrevert-remote--check (buffer)
  "Revert BUFFER as the stock handler does, if its file changed.
Nothing is done while Tramp's connection is down: the buffer is
checked again once a watcher runs there.  A file buffer reverted as
`revert-buffer' reverts by default gets a copy of its file from the
watcher first, in the background, and is checked again when it has
come: the handler then reads that copy (see
fastrevert-remote-revert.el).  Any other buffer is reverted through
Tramp."
  (with-current-buffer buffer
    (pcase-let* ((`(,conn . ,item) (fastrevert-remote--buffer-conn-item))
                 (state (and item (fastrevert-remote--item-state item))))
      (cond ((null state))
            (fastrevert-remote--copy-ready
             (fastrevert-remote--revert-from-copy conn item))
            ((or fastrevert-remote--fetching
                 (not (auto-revert-active-p))
                 (equal state fastrevert-remote--applied)
                 (not (fastrevert-remote--connected-p conn))))

            ((and (fastrevert-remote--conn-copies conn)
                  buffer-file-name
                  (eq revert-buffer-function #'revert-buffer--default)
                  (not (string-prefix-p "- " state))
                  (or auto-revert-tail-mode (not (buffer-modified-p))))
             (fastrevert-remote--fetch conn buffer))
            (t
             (fastrevert-remote--applied
              state (fastrevert-remote-run-handler (string-prefix-p "- " state))))))))

(defun fastrevert-remote--applied (state result)
  "Note the check of the current buffer for STATE, whose RESULT is given.
RESULT is what `fastrevert-remote-run-handler' returns.  The buffer
then holds the version STATE names, or a later one, unless it was
kept as it was: modified, or a revert that failed."
  (let ((reverted (or (car result)
                      ;; A revert of a non-file buffer, such as Dired's,
                      ;; may not run `after-revert-hook'.
                      (and (not buffer-file-name) (cdr result)))))
    (when reverted
      (fastrevert--count :reverts)
      (fastrevert-remote--count :remote-reverts 1))
    (when (or reverted auto-revert-tail-mode
              (not (or (cdr result) (buffer-modified-p))))
      (setq fastrevert-remote--applied state))))

(defun fastrevert-remote--fetch (conn buffer)
  "Ask CONN's watcher for a copy of BUFFER's remote file.
A tail-mode buffer asks only for what was appended, unless the file
shrank, when stock reads it whole."
  (with-current-buffer buffer
    (pcase-let* ((`(,_ . ,item) (fastrevert-remote--buffer-conn-item))
                 (state (fastrevert-remote--item-state item))
                 (size (string-to-number (cadr (split-string state " "))))
                 (base (if (and auto-revert-tail-mode (<= auto-revert-tail-pos size))
                           auto-revert-tail-pos
                         0))
                 (id (cl-incf (fastrevert-remote--conn-copy-id conn))))
      (setq fastrevert-remote--fetching t)
      (puthash id (list buffer state base) (fastrevert-remote--conn-asked conn))
      (fastrevert-remote--send conn (format "<%d %d %s\n" id (1+ base)
                                            (fastrevert-remote--item-name item))))))

(defun fastrevert-remote--copy-line (conn line)
  "Take LINE of the copy CONN's watcher is sending; return non-nil at its end."
  (if (not (string-prefix-p "E " line))
      (progn (push line (fastrevert-remote--conn-chunks conn)) nil)
    (pcase-let ((`(,_ ,buffer ,state ,base) (fastrevert-remote--conn-receiving conn))
                (ok (string-match-p "\\`E [0-9]+ 0" line))
                (copy (make-temp-file "fastrevert-remote-")))
      (when ok
        (let ((coding-system-for-write 'no-conversion))
          (write-region (base64-decode-string
                         (apply #'concat (nreverse (fastrevert-remote--conn-chunks conn))))
                        nil copy nil 'silent)))
      (setf (fastrevert-remote--conn-receiving conn) nil
            (fastrevert-remote--conn-chunks conn) nil)
      (fastrevert-remote--copied buffer state base copy ok)
      t)))

(defun fastrevert-remote--drop-copies (conn)
  "Forget the copies CONN's watcher was asked for, as it has ended."
  (maphash (lambda (_ asked)
             (when (buffer-live-p (car asked))
               (with-current-buffer (car asked)
                 (setq fastrevert-remote--fetching nil))))
           (fastrevert-remote--conn-asked conn))
  (clrhash (fastrevert-remote--conn-asked conn))
  (setf (fastrevert-remote--conn-receiving conn) nil
        (fastrevert-remote--conn-chunks conn) nil))

(defun fastrevert-remote--copied (buffer state base copy ok)
  "Note that COPY of BUFFER's file, from byte BASE for STATE, has come.
OK is nil if the file could not be read.  BUFFER is checked soon,
and then reverted from the copy."
  (if (not (buffer-live-p buffer))
      (delete-file copy)
    (with-current-buffer buffer
      (setq fastrevert-remote--fetching nil)
      (fastrevert-remote--drop-copy)
      (setq fastrevert-remote--copy-ready (list state base copy ok)))
    (puthash buffer t fastrevert-remote--pending)
    (fastrevert-remote--schedule-check)))

(defun fastrevert-remote--drop-copy ()
  "Delete the copy of the current buffer's file that waits to be read, if any."
  (when fastrevert-remote--copy-ready
    (ignore-errors (delete-file (nth 2 fastrevert-remote--copy-ready)))
    (setq fastrevert-remote--copy-ready nil)))

(defun fastrevert-remote--revert-from-copy (conn item)
  "Revert the current buffer from the copy of ITEM's file that has come.
CONN is its connection.  The buffer is checked again if its file
changed meanwhile.  A copy that failed (the file cannot be read, say)
has the handler read the file through Tramp, as stock would."
  (pcase-let ((`(,state ,base ,copy ,ok) fastrevert-remote--copy-ready))
    (unwind-protect
        (when (and (auto-revert-active-p) (fastrevert-remote--connected-p conn))
          (cond ((not ok)
                 (fastrevert-remote--applied state (fastrevert-remote-run-handler nil)))
                ((or auto-revert-tail-mode (not (buffer-modified-p)))
                 (fastrevert-remote--applied
                  state (fastrevert-remote-run-handler nil copy base (string-to-number state)))
                 (fastrevert-remote--forget-cached buffer-file-name)))
          (fastrevert-remote--compare (current-buffer) item))
      (fastrevert-remote--drop-copy))))

(defun fastrevert-remote--forget-cached (file)
  "Drop what Tramp's cache has of FILE, which a revert from a copy made stale."
  (ignore-errors
    (let ((vec (tramp-dissect-file-name file)))
      (tramp-flush-file-properties vec (tramp-file-name-localname vec)))))

(defun fastrevert-remote--note-save ()
  "Take the current buffer's file as saved here to be the version it has.
The watcher's line for the save is then matched by modification time,
as a buffer first watched is."
  (when (fastrevert-remote--descriptor-p auto-revert-notify-watch-descriptor)
    (let ((modtime (visited-file-modtime)))
      (setq fastrevert-remote--applied 'unknown
            fastrevert-remote--known
            (cons (and (not (numberp modtime)) (floor (float-time modtime))) nil)))))

(add-hook 'after-save-hook #'fastrevert-remote--note-save)

(defun fastrevert-remote-unload-function ()
  "Stop the remote watchers, for `unload-feature' of this library.
Return nil, so that `unload-feature' goes on to remove the rest."
  (fastrevert-remote-stop-all)
  (remove-hook 'after-save-hook #'fastrevert-remote--note-save)
  nil)

(provide 'fastrevert-remote)

;;; fastrevert-remote.el ends here
