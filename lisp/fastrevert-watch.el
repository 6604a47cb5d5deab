;;; fastrevert-watch.el --- The buffers the engine watches files for -*- lexical-binding: t; -*-

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; A buffer the engine watches a file for has a watch id, which the
;; engine's records name, and holds its watch in
;; `auto-revert-notify-watch-descriptor', where stock auto-revert looks
;; for a notification watch.  A user may have tens of thousands of such
;; buffers, so each costs little: the descriptor is one cons, which also
;; says whether the engine has taken its first look at the file, and the
;; buffers are found by id in a vector, a word each, where a hash table
;; from id to buffer takes about six.

;;; Code:

(require 'cl-lib)

(defconst fastrevert--id-slots (ash 1 24)
  "How many buffers the engine can watch files for at once.
A watch id is its buffer's slot in `fastrevert--watched-buffers' plus
this times the number of the registration, so that an id is never
reused when its slot is: a record for a released watch finds no buffer.")

(defvar fastrevert--watched-buffers (make-vector 0 nil)
  "The buffers the engine watches files for, each in the slot of its id.
A free slot holds the number of the next free one, the last one nil.")

(defvar fastrevert--free-slot nil
  "The first free slot of `fastrevert--watched-buffers', or nil if none.")

(defvar fastrevert--registrations 0
  "How many watch ids have been handed out.")

(defun fastrevert--descriptor-p (descriptor)
  "Return non-nil if DESCRIPTOR is a watch held by the engine.
That is (fastrevert . ID), and (fastrevert-watched . ID) once the
engine reports every change to the file; a buffer-local flag would
say so at the cost of two conses in each of many buffers."
  (memq (car-safe descriptor) '(fastrevert fastrevert-watched)))

(defun fastrevert--watching-p (buffer)
  "Return non-nil once the engine reports every change to BUFFER's file."
  (eq (car-safe (buffer-local-value 'auto-revert-notify-watch-descriptor buffer))
      'fastrevert-watched))

(defun fastrevert--next-id ()
  "Return the id of the next watch, for `fastrevert--file-buffer'."
  (unless fastrevert--free-slot
    (let* ((size (length fastrevert--watched-buffers))
           (new-size (min fastrevert--id-slots (max 64 (* 2 size)))))
      (when (= new-size size)
        (error "No more than %d buffers can have their files watched" fastrevert--id-slots))
      (setq fastrevert--watched-buffers
            (vconcat fastrevert--watched-buffers (make-vector (- new-size size) nil)))
      (cl-loop for slot from size below (1- new-size)
               do (aset fastrevert--watched-buffers slot (1+ slot)))
      (setq fastrevert--free-slot size)))
  (setq fastrevert--registrations (1+ fastrevert--registrations))
  (+ fastrevert--free-slot (* fastrevert--id-slots fastrevert--registrations)))

(defun fastrevert--file-buffer (id buffer)
  "File BUFFER under ID, which `fastrevert--next-id' returned last."
  (let ((slot (% id fastrevert--id-slots)))
    (cl-assert (eql slot fastrevert--free-slot))
    (setq fastrevert--free-slot (aref fastrevert--watched-buffers slot))
    (aset fastrevert--watched-buffers slot buffer)))

(defun fastrevert--buffer-of (id)
  "Return the live buffer watched under ID, or nil."
  (let* ((slot (and (natnump id) (% id fastrevert--id-slots)))
         (buffer (and slot (< slot (length fastrevert--watched-buffers))
                      (aref fastrevert--watched-buffers slot))))
    (and (bufferp buffer) (buffer-live-p buffer)
         (eql (cdr-safe (buffer-local-value 'auto-revert-notify-watch-descriptor buffer)) id)
         buffer)))

(defun fastrevert--release-id (id)
  "Free the slot of the watch ID, if its buffer is still filed under it."
  (when (fastrevert--buffer-of id)
    (let ((slot (% id fastrevert--id-slots)))
      (aset fastrevert--watched-buffers slot fastrevert--free-slot)
      (setq fastrevert--free-slot slot))))

(defun fastrevert--watched-buffer-list ()
  "Return the live buffers the engine watches files for."
  (cl-loop for buffer across fastrevert--watched-buffers
           when (and (bufferp buffer) (buffer-live-p buffer)) collect buffer))

(defun fastrevert--forget-watched-buffers ()
  "Forget every watched buffer, and the room they took."
  (setq fastrevert--watched-buffers (make-vector 0 nil)
        fastrevert--free-slot nil))

;;;; The buffers shown

;; Where a directory watch sees no write to the files in it (kqueue, on
;; the BSDs), the engine polls the watched files by stat, and those of
;; the buffers shown in a window more often.  This tells it which.

(declare-function fastrevert--mod-running-p "fastrevert-module" ())
(declare-function fastrevert--mod-watch-visible "fastrevert-module" (ids))
(declare-function fastrevert--mod-watch-backend "fastrevert-module" ())

(defvar fastrevert--visible-ids nil
  "The watch ids of the buffers shown in a window, as the engine last heard.")

(defun fastrevert--shown-watch-ids ()
  "Return the watch ids of the buffers shown in a window, in order."
  (let ((ids nil))
    (dolist (frame (frame-list))
      (dolist (window (window-list frame 'no-minibuffer))
        (let ((descriptor (buffer-local-value 'auto-revert-notify-watch-descriptor
                                              (window-buffer window))))
          (when (fastrevert--descriptor-p descriptor)
            (push (cdr descriptor) ids)))))
    (sort (delete-dups ids) #'<)))

(defun fastrevert--update-visible (&rest _)
  "Tell the engine which watched buffers are shown, if that changed."
  (let ((ids (fastrevert--shown-watch-ids)))
    (unless (equal ids fastrevert--visible-ids)
      (setq fastrevert--visible-ids ids)
      (when (fastrevert--mod-running-p)
        (fastrevert--mod-watch-visible ids)))))

(defun fastrevert--track-visible (on)
  "With ON non-nil, keep the engine told which watched buffers are shown.
That is done only where the engine polls watched files (see
`fastrevert--mod-watch-backend'); with ON nil, it stops."
  (setq fastrevert--visible-ids nil)
  (if (and on (not (plist-get (fastrevert--mod-watch-backend) :sees-file-writes)))
      (progn
        (add-hook 'window-buffer-change-functions #'fastrevert--update-visible)
        (fastrevert--update-visible))
    (remove-hook 'window-buffer-change-functions #'fastrevert--update-visible)))

(provide 'fastrevert-watch)

;;; fastrevert-watch.el ends here
