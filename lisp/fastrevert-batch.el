;;; fastrevert-batch.el --- How fastrevert handles a batch of buffers -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; A checkout or a change of a repository hands fastrevert hundreds or
;; thousands of buffers at once, to revert or to refresh the VC state
;; of.  This library holds how such a batch is worked through (visible
;; buffers first, progress shown, stopping at input) and the setting it
;; runs in, which keeps off what Emacs would otherwise do once per
;; buffer for every buffer: walking the buffer list for a `let' of
;; `case-fold-search', collecting garbage over a large heap, walking up
;; the same directories for each backend.

;;; Code:

(require 'cl-lib)
(require 'autorevert)

(defun fastrevert--take-pending (queue)
  "Return the live buffers of QUEUE, visible ones first, and empty it.
The value is (COUNT . BUFFERS), COUNT being how many are visible."
  (let (visible hidden (count 0))
    (maphash (lambda (buffer _)
               (when (buffer-live-p buffer)
                 (if (not (get-buffer-window buffer 'visible))
                     (push buffer hidden)
                   (push buffer visible)
                   (setq count (1+ count)))))
             queue)
    (clrhash queue)
    (cons count (nconc visible hidden))))

(defvar fastrevert--dominating-cache nil
  "Memo of `locate-dominating-file' for one batch of checks, or nil.
The stock handler refreshes the VC state of every reverted buffer, and
that walks up the directory tree once per VC backend.  Buffers of one
batch mostly share their directories, so a batch shares those walks.")

(defun fastrevert--locate-dominating-file-advice (function file name)
  "Call FUNCTION on FILE and NAME, through the batch's memo if there is one.
FUNCTION is `locate-dominating-file'.  For a FILE that is not a
directory the search starts, in effect, from its directory, so files
of one directory share an entry."
  (if (and fastrevert--dominating-cache (stringp name) (stringp file)
           (not (file-directory-p file)))
      (let* ((directory (file-name-directory (expand-file-name file)))
             (key (cons directory name))
             (cached (gethash key fastrevert--dominating-cache 'none)))
        (if (eq cached 'none)
            (puthash key (funcall function directory name) fastrevert--dominating-cache)
          cached))
    (funcall function file name)))

(defun fastrevert--work-through (queue function message)
  "Call FUNCTION on the live buffers of QUEUE, visible ones first.
QUEUE is a hash table whose keys are buffers; each buffer leaves it as
it is handled.  Once the visible ones are done, Emacs redisplays them
before it goes on to the others.  When `auto-revert-stop-on-user-input'
is non-nil, stop at pending input.  Show progress with MESSAGE past 50
buffers.  Return non-nil if QUEUE was emptied."
  (let* ((taken (fastrevert--take-pending queue))
         (visible (car taken))
         (buffers (cdr taken))
         (total (length buffers))
         (reporter (and (> total 50) (make-progress-reporter message 0 total)))
         (done 0))
    (unwind-protect
        (while (and buffers
                    (not (and auto-revert-stop-on-user-input (input-pending-p))))
          (let ((buffer (pop buffers)))
            (when (buffer-live-p buffer)
              (with-demoted-errors "fastrevert: %S"
                (funcall function buffer))))
          (setq done (1+ done))
          (when (and (= done visible) buffers (not noninteractive))
            (redisplay))
          (when reporter (progress-reporter-update reporter done)))
      ;; Whatever was not reached, by input or by an error, stays queued.
      (dolist (buffer buffers) (puthash buffer t queue)))
    (when (and reporter (null buffers))
      (progress-reporter-done reporter))
    (null buffers)))

;; At scale, two things in Emacs itself make each revert cost more the more
;; buffers there are.  `case-fold-search' is a per-buffer variable: a `let'
;; of it in a buffer where it has no local value changes its default, and
;; Emacs then visits every live buffer to update the ones that follow the
;; default.  Reverting a file binds it several times (finding the coding
;; system, in a work buffer; abbreviating file names, for VC), so with
;; 10,000 buffers a revert walked the buffer list a dozen times.  While a
;; batch handles a buffer, that buffer and Emacs's coding work buffers get
;; a local value equal to the default, which keeps those bindings local;
;; the local value goes again afterwards, unless something changed it.
;; Emacs makes the work buffer in which a revert finds the coding at the
;; first revert of the session, and keeps it: a batch makes it first, or
;; the first batch of the session would bind it there without a local
;; value, and its reverts would cost five times as much.
;; And every garbage collection marks every buffer: a batch collects less
;; often (`fastrevert--batch-gc-threshold') instead of every 800 KB.

(defconst fastrevert--coding-work-buffers '(" *code-converting-work*" " *code-conversion-work*")
  "Buffers in which Emacs finds and converts the coding of a file it reads.")

(defconst fastrevert--batch-gc-threshold (* 64 1024 1024)
  "The least `gc-cons-threshold' while a batch is handled.")

(defun fastrevert--give-local-case-fold (buffer)
  "Give BUFFER a local `case-fold-search' equal to its default value.
Return non-nil if BUFFER had none, so that it must be taken back."
  (unless (local-variable-p 'case-fold-search buffer)
    (with-current-buffer buffer
      (setq-local case-fold-search (default-value 'case-fold-search)))
    t))

(defun fastrevert--take-back-local-case-fold (buffer)
  "Remove the local `case-fold-search' that BUFFER was given, if unchanged."
  (when (and (buffer-live-p buffer)
             (local-variable-p 'case-fold-search buffer)
             (eq (buffer-local-value 'case-fold-search buffer)
                 (default-value 'case-fold-search)))
    (with-current-buffer buffer
      (kill-local-variable 'case-fold-search))))

(defun fastrevert--call-with-local-case-fold (buffers function &rest args)
  "Call FUNCTION with ARGS while BUFFERS have a local `case-fold-search'."
  (let ((given (cl-remove-if-not #'fastrevert--give-local-case-fold
                                 (cl-remove-if-not #'buffer-live-p buffers))))
    (unwind-protect (apply function args)
      (mapc #'fastrevert--take-back-local-case-fold given))))

(defun fastrevert--in-batch (function)
  "Return FUNCTION wrapped for a batch, as a function of one buffer.
The buffer has a local `case-fold-search' while FUNCTION handles it."
  (lambda (buffer) (fastrevert--call-with-local-case-fold (list buffer) function buffer)))

(defun fastrevert--call-as-batch (function)
  "Call FUNCTION in the setting of a batch of reverts or VC refreshes.
Emacs's coding work buffers have a local `case-fold-search', and
garbage is collected less often."
  (let ((gc-cons-threshold (max gc-cons-threshold fastrevert--batch-gc-threshold)))
    (fastrevert--call-with-local-case-fold
     (mapcar (lambda (name) (get-buffer-create name t)) fastrevert--coding-work-buffers)
     function)))

(defun fastrevert--queued (queue)
  "Return the buffers of QUEUE, a hash table whose keys are buffers."
  (let (buffers)
    (maphash (lambda (buffer _) (push buffer buffers)) queue)
    buffers))

(defconst fastrevert--queue-keep-size 4096
  "The most buffers an empty queue of buffers keeps room for.
Room for a thousand buffers is about 40 KB; growing a new queue to
that size, as a queue that every change of a repository refills
would, makes three times as much garbage.")

(defun fastrevert--fresh-if-large (queue)
  "Return QUEUE, or a new empty queue when QUEUE is empty but large.
Emacs's hash tables never shrink: a queue would keep a checkout's room."
  (if (and (zerop (hash-table-count queue))
           (> (hash-table-size queue) fastrevert--queue-keep-size))
      (make-hash-table :test #'eq)
    queue))

;;;; For each buffer, the text before the state

;; Stock auto-revert refreshes a buffer's VC state right after reverting
;; it, so the mode line never describes a newer file than the text does.
;; A refresh that a change of the repository asks for can come first: `git
;; stash' writes the index, then starts `git reset --hard' to put the
;; files back, and the engine may see the repository idle in between and
;; report the index alone.  Git, asked later, already says the file is
;; clean while its buffer still shows the edit.  So a buffer's state is
;; refreshed only while its text is its file's, from what VC read while
;; it was; a buffer waiting for its revert keeps its mode line until the
;; revert, which asks for the refresh again.

(defvar vc-file-prop-obarray)

(defun fastrevert--refresh-if-current (refresh current-p &optional read-before)
  "Call REFRESH to refresh the current buffer's VC state while its text is current.
CURRENT-P, called with the buffer, returns nil while its text waits
for a revert.  Then REFRESH is not called.  READ-BEFORE non-nil says
that what REFRESH reads was read before this call, as a batch reads
Git's answers; otherwise CURRENT-P is asked again once REFRESH is
done, and if the file changed meanwhile, the buffer's `vc-mode' and
the VC properties of its file are put back as they were.  Return
non-nil if the buffer shows its refreshed state."
  (let ((buffer (current-buffer)))
    (when (funcall current-p buffer)
      (if read-before
          (progn (funcall refresh) t)
        (let* ((file (and buffer-file-name
                          (intern (expand-file-name buffer-file-name) vc-file-prop-obarray)))
               (properties (and file (copy-sequence (symbol-plist file))))
               (mode vc-mode))
          (funcall refresh)
          (or (funcall current-p buffer)
              (progn
                (setq vc-mode mode)
                (when file (setplist file properties))
                (force-mode-line-update)
                nil)))))))

(provide 'fastrevert-batch)

;;; fastrevert-batch.el ends here
