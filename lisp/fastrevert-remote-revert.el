;;; fastrevert-remote-revert.el --- Reverting a remote buffer as stock does -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; A remote buffer whose file changed is reverted by the stock
;; `auto-revert-handler'.  Run as it is, that handler asks the host
;; through Tramp, on the main thread, whether the file changed and then
;; reads it: about twenty-five round trips per revert, the cache of
;; Tramp turned off.  With a 50 ms round trip that is over a second
;; during which Emacs is frozen, for each change of each file.
;;
;; Here the handler runs unchanged, but what it asks about the file
;; itself is answered without a round trip:
;;
;; - whether the file is stale: from the watcher's line, which said it
;;   changed (see `fastrevert-remote--stale-function');
;; - its contents: from a copy fetched beforehand in the background,
;;   over the connection Tramp shares (`fastrevert-remote-watcher-fetch'),
;;   inserted and decoded as Tramp inserts its own local copy;
;; - its size and modification time: from that copy and that line.
;;
;; A file name handler placed before Tramp's for the duration of the
;; revert, and for the file's name alone, gives these answers
;; (`fastrevert-remote--copy-handler'); every other operation, and every
;; other file, reaches Tramp as before.  The VC refresh that follows a
;; revert is stock's, through Tramp, with Tramp's cache as the user set
;; it.

;;; Code:

(require 'cl-lib)
(require 'autorevert)
(require 'fastrevert-remote-watcher)

;; Set by the revert hook fastrevert.el adds.
(defvar fastrevert--reverted)
;; Emacs 31's name of `revert-buffer-in-progress-p'.
(defvar revert-buffer-in-progress)

(defvar fastrevert-remote--said-stale nil
  "What the stale predicate answered in the check under way.")

(defvar fastrevert-remote--copy nil
  "The copy that `fastrevert-remote--copy-handler' answers from, or nil.
A list (FILE COPY BASE MTIME TRUENAME): the remote FILE, the local
file COPY holding its bytes from byte BASE on, the modification time
MTIME (a number) the watcher reported, and FILE's truename.")

(defun fastrevert-remote--stale-function (gone)
  "Return the stale predicate for checking the current buffer.
GONE non-nil means the watcher found the file missing.  For a file
buffer with the default predicate, and for Dired, the watcher's line
has answered the question the predicate would ask the host, so the
predicate keeps only the conditions that need no round trip: not
modified, or for Dired not being edited.  Any other predicate is the
buffer's own."
  (cond ((and buffer-file-name
              (memq buffer-stale-function '(nil buffer-stale--default-function)))
         (lambda (&optional _noconfirm)
           (setq fastrevert-remote--said-stale (and (not gone) (not (buffer-modified-p))))))
        ((and (eq buffer-stale-function 'dired-buffer-stale-p)
              (stringp (bound-and-true-p dired-directory)))
         (lambda (&optional _noconfirm)
           (setq fastrevert-remote--said-stale (and (not gone) buffer-read-only))))
        (t
         (let ((own buffer-stale-function))
           (lambda (&optional noconfirm)
             (setq fastrevert-remote--said-stale (funcall own noconfirm)))))))

;;;; Answering from a fetched copy

(defun fastrevert-remote--copy-coding-alist (file copy)
  "Return `file-coding-system-alist' with FILE's entries also matching COPY.
The copy is decoded as FILE would be, as Tramp decodes its own copies."
  (let ((extra nil))
    (dolist (entry file-coding-system-alist)
      (when (and (consp entry) (stringp (car entry)) (string-match-p (car entry) file))
        (push (cons (concat "\\`" (regexp-quote copy) "\\'") (cdr entry)) extra)))
    (append (nreverse extra) file-coding-system-alist)))

(defun fastrevert-remote--copy-size ()
  "Return the size of the remote file, as the fetched copy gives it."
  (pcase-let ((`(,_file ,copy ,base . ,_) fastrevert-remote--copy))
    (+ base (file-attribute-size (file-attributes copy)))))

(defun fastrevert-remote--copy-insert (visit beg end replace)
  "Insert the remote file from its copy, as `insert-file-contents' would.
VISIT, BEG, END and REPLACE are as for that function; BEG and END
count bytes of the remote file."
  (pcase-let ((`(,file ,copy ,base ,mtime . ,_) fastrevert-remote--copy))
    (let* ((file-coding-system-alist (fastrevert-remote--copy-coding-alist file copy))
           (result (insert-file-contents copy visit (and (or beg end) (- (or beg base) base))
                                         (and end (- end base)) replace)))
      (when visit
        (setq buffer-file-name file)
        (set-visited-file-modtime (seconds-to-time mtime))
        (set-buffer-modified-p nil))
      (list file (cadr result)))))

(defun fastrevert-remote--copy-handler (operation &rest args)
  "Answer OPERATION on the remote file of `fastrevert-remote--copy' with ARGS.
What a revert asks about the file itself is answered from the copy
and the watcher's line; anything else goes on to Tramp."
  (pcase-let ((`(,_file ,_copy ,_base ,mtime ,truename) fastrevert-remote--copy))
    (pcase operation
      ((or 'file-exists-p 'file-readable-p 'file-regular-p) t)
      ('file-writable-p (not buffer-read-only))
      ('file-directory-p nil)
      ('file-truename truename)
      ('verify-visited-file-modtime nil)
      ((or 'lock-file 'unlock-file 'file-locked-p) nil)
      ('set-visited-file-modtime
       (set-visited-file-modtime (or (car args) (seconds-to-time mtime))))
      ('file-attributes
       (let ((time (seconds-to-time mtime)))
         (list nil 1 (user-uid) (group-gid) time time time (fastrevert-remote--copy-size)
               "-rw-r--r--" t 0 -1)))
      ('insert-file-contents (apply #'fastrevert-remote--copy-insert (cdr args)))
      (_ (let ((inhibit-file-name-handlers
                (cons #'fastrevert-remote--copy-handler
                      (and (eq inhibit-file-name-operation operation)
                           inhibit-file-name-handlers)))
               (inhibit-file-name-operation operation))
           (apply operation args))))))

(defun fastrevert-remote-run-handler (gone &optional copy base mtime)
  "Run the stock `auto-revert-handler' in the current buffer, its file changed.
GONE non-nil means the watcher found the file missing.  With COPY, a
local file holding the buffer's remote file from byte BASE on, fetched
after the watcher reported its modification time MTIME (a number),
what the handler asks about the file itself is answered from them.

The VC refresh the handler makes after a revert is made after it
returns, by `fastrevert-remote--refresh-vc'.  Return (REVERTED .
STALE): whether the buffer was reverted, and what its stale predicate
said."
  (let ((fastrevert--reverted nil)
        (fastrevert-remote--said-stale nil)
        (vc-wanted nil))
    (let ((buffer-stale-function (fastrevert-remote--stale-function gone))
          (fastrevert-remote--copy
           (and copy (list buffer-file-name copy base mtime
                           (expand-file-name (or buffer-file-truename buffer-file-name)))))
          (file-name-handler-alist
           (if copy
               (cons (cons (concat "\\`" (regexp-quote buffer-file-name) "\\'")
                           #'fastrevert-remote--copy-handler)
                     file-name-handler-alist)
             file-name-handler-alist)))
      (setq auto-revert-notify-modified-p t)
      (cl-letf (((symbol-function 'vc-refresh-state) (lambda () (setq vc-wanted t))))
        (auto-revert-handler)))
    (when vc-wanted
      (fastrevert-remote--refresh-vc (current-buffer)))
    (cons fastrevert--reverted fastrevert-remote--said-stale)))

;;;; The VC refresh after a revert

(defconst fastrevert-remote--vc-spacing 2.0
  "The fewest seconds between two VC refreshes of one remote buffer.
A VC refresh of a remote file costs several round trips on the main
thread, Tramp asking anew whether the file is registered; a file that
changes many times a second (a log followed in tail mode) would
otherwise have one after each revert.  The refreshes asked for within
this time of the last become one, at its end.")

(defvar-local fastrevert-remote--vc-refreshed-at nil
  "When the VC state of this buffer was last refreshed here, or nil.")

(defvar-local fastrevert-remote--vc-timer nil
  "Timer of this buffer's VC refresh put off, or nil.")

(defun fastrevert-remote--refresh-vc (buffer)
  "Refresh BUFFER's VC state soon, as the stock handler does after a revert.
It is refreshed once Emacs has shown the new text, from a timer,
outside the handler's binding of `remote-file-name-inhibit-cache' to
t so that Tramp answers from its cache as for any other call; and not
sooner than `fastrevert-remote--vc-spacing' seconds after it was last
refreshed."
  (with-current-buffer buffer
    (unless (timerp fastrevert-remote--vc-timer)
      (setq fastrevert-remote--vc-timer
            (run-at-time (max 0 (if fastrevert-remote--vc-refreshed-at
                                    (- (+ fastrevert-remote--vc-refreshed-at
                                          fastrevert-remote--vc-spacing)
                                       (float-time))
                                  0))
                         nil #'fastrevert-remote--refresh-vc-now buffer)))))

(defun fastrevert-remote--refresh-vc-now (buffer)
  "Refresh BUFFER's VC state now, as the stock handler does after a revert."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (setq fastrevert-remote--vc-timer nil)
      (if (fastrevert-remote-tramp-busy-p)
          ;; Called from inside a wait of Tramp's: later.
          (setq fastrevert-remote--vc-timer
                (run-at-time 0.1 nil #'fastrevert-remote--refresh-vc-now buffer))
        (setq fastrevert-remote--vc-refreshed-at (float-time))
      (when buffer-file-name
        (with-suppressed-warnings ((obsolete revert-buffer-in-progress-p))
          (let ((revert-buffer-in-progress t)
                (revert-buffer-in-progress-p t))
            (with-demoted-errors "fastrevert: VC refresh: %S"
              (vc-refresh-state)))))))))

(provide 'fastrevert-remote-revert)

;;; fastrevert-remote-revert.el ends here
