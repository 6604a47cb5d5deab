;;; fastrevert.el --- Fast, native auto-revert and process output -*- lexical-binding: t; -*-

;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1"))
;; Keywords: files, processes, convenience

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; fastrevert moves the work of auto-revert and of reading subprocess
;; output off Emacs's main thread, into a native engine thread that a
;; dynamic module (written in C++) runs.
;;
;; The engine never calls Emacs.  It reports through a pipe process:
;; when results are waiting it writes one byte, and that process's
;; filter takes every waiting result in one module call.
;;
;; This file is the entry point and the auto-revert front:
;; `fastrevert-mode' and the statistics.  It loads the rest, each
;; library standing only on those before it:
;;
;;   fastrevert-engine.el   the module, the engine, its records, waits
;;   fastrevert-batch.el    how a batch of buffers is worked through
;;   fastrevert-vc.el       the VC state of a batch of buffers
;;   fastrevert-watch.el    the buffers the engine watches files for
;;   fastrevert-decode.el   a child's bytes to text in a buffer
;;   fastrevert-child.el    starting a child as stock Emacs starts it
;;   fastrevert-process.el  `fastrevert-make-process' and companions
;;   fastrevert-call.el     `fastrevert-call-process'
;;
;; Usage, from an init file, once the package is installed:
;;
;;   (fastrevert-mode 1)
;;
;; Loading the Lisp needs no native module.  The module is loaded when
;; the mode is turned on or a native primitive is first called; when
;; it is missing, fastrevert offers to build it with CMake (see
;; `fastrevert-module-compile').

;;; Code:

(require 'fastrevert-engine)

;;;; Statistics

(defvar fastrevert--main-thread-seconds 0.0
  "Seconds the main thread has spent handling engine results.")

(defvar fastrevert--lisp-counters nil
  "Plist of counters kept on the Lisp side, such as :reverts.")

(defun fastrevert--count (counter &optional amount)
  "Add AMOUNT (default 1) to the Lisp-side COUNTER."
  (setq fastrevert--lisp-counters
        (plist-put fastrevert--lisp-counters counter
                   (+ (or (plist-get fastrevert--lisp-counters counter) 0)
                      (or amount 1)))))

(defun fastrevert-stats ()
  "Return a plist of fastrevert's counters.
Engine counters are those of the running engine: `:watches' and
`:polled-files' (files watched and polled now), `:kernel-events',
`:events-dropped-natively' (events for files no buffer visits),
`:batches', `:overflows', `:processes' and `:bytes-read'.  Lisp
counters: `:reverts' and `:main-thread-ms', the time the main thread
spent handling engine results; and those of the VC batches (see
`fastrevert-vc-stats')."
  (let ((stats (copy-sequence
                (or (fastrevert--mod-stats)
                    '(:watches 0 :polled-files 0 :kernel-events 0
                               :events-dropped-natively 0 :batches 0 :overflows 0
                               :processes 0 :bytes-read 0)))))
    (setq stats (plist-put stats :reverts
                           (or (plist-get fastrevert--lisp-counters :reverts) 0)))
    (setq stats (plist-put stats :main-thread-ms
                           (+ (* 1000.0 fastrevert--main-thread-seconds)
                              (/ (or (plist-get stats :drain-ns) 0) 1e6))))
    (nconc stats (fastrevert-vc-stats) (fastrevert-remote-stats))))

;;;; fastrevert-mode: auto-revert driven by the engine

(require 'autorevert)
(require 'cl-lib)
(require 'vc-hooks)
(require 'fastrevert-batch)
(require 'fastrevert-vc)
(require 'fastrevert-watch)
(require 'fastrevert-remote)
(declare-function fastrevert--mod-watch-add "fastrevert-module" (id file mode &optional contents))
(declare-function fastrevert--mod-watch-remove "fastrevert-module" (id))
(declare-function fastrevert--mod-watch-configure "fastrevert-module"
                  (poll-interval settle-delay safety-poll))
(declare-function fastrevert--mod-watch-hold-limit "fastrevert-module" (limit))
(declare-function fastrevert--mod-watch-vc-info "fastrevert-module" (with-index))

(defcustom fastrevert-settle-delay 0.03
  "Seconds a changed file must stay quiet before its buffer is checked.
A burst of changes, such as a checkout rewriting many files, becomes one
batch.  A file written continuously is still checked at least every
ten settle delays.  A change of a repository's HEAD, branch or index,
the last a Git operation makes, is looked at sooner (12 ms, or this
delay if shorter), with the files changed before it: while the
operation runs, their changes are held until it ends."
  :type 'number
  :group 'fastrevert)

;; `define-minor-mode' defines the mode's variable at the end of this
;; file, after the functions that read it.  Declaring it here makes them
;; compile cleanly in an Emacs that has not loaded fastrevert, such as
;; the one the background native compiler runs.
(defvar fastrevert-mode)

(defvar fastrevert--stock-buffers nil
  "Auto-reverted buffers the engine cannot watch, left to stock polling.
These are remote buffers and non-file buffers that do not support
notification.")

(defvar fastrevert--pending (make-hash-table :test #'eq)
  "Buffers whose files may have changed, waiting to be checked.")

(defvar fastrevert--revert-timer nil
  "Timer that checks the pending buffers, or nil.")

(defvar fastrevert--reverted nil
  "Non-nil once the buffer being checked has been reverted.")

(defvar fastrevert--bypass nil
  "Non-nil while stock auto-revert functions must run unadvised.")

(defvar-local fastrevert--polled nil
  "Non-nil if the engine polls this buffer's file instead of being notified.
Stock auto-revert has no notification watch for such a file, so that
every check of the buffer asks its stale predicate.  Local only when
non-nil: a local binding costs memory in each of many buffers.")

(defun fastrevert--target ()
  "Return what the engine should watch for the current buffer, or nil.
That is the visited file, or the directory of a non-file buffer that
reverts by notification (as Dired does).  Remote names are left to
the stock machinery."
  (cond (buffer-file-name
         (let ((file (expand-file-name buffer-file-name)))
           (unless (file-remote-p file) file)))
        ((and buffer-auto-revert-by-notification default-directory)
         (let ((dir (expand-file-name default-directory)))
           (unless (file-remote-p dir) (directory-file-name dir))))))

(defun fastrevert--watch-mode ()
  "Return how the engine should watch the current buffer's target.
`poll' when `auto-revert-use-notify' is nil or the directory matches
`auto-revert-notify-exclude-dir-regexp', otherwise `notify'."
  (if (or (not auto-revert-use-notify)
          (string-match-p auto-revert-notify-exclude-dir-regexp
                          (expand-file-name default-directory)))
      'poll
    'notify))

(defun fastrevert--encode-file-name (file)
  "Return FILE encoded as the bytes the file system sees."
  (encode-coding-string file (or file-name-coding-system
                                 default-file-name-coding-system)))

(defun fastrevert--register (target)
  "Watch TARGET in the engine on behalf of the current buffer."
  (let ((id (fastrevert--next-id))
        (mode (fastrevert--watch-mode)))
    (fastrevert--mod-watch-add id (fastrevert--encode-file-name target)
                               mode (not buffer-file-name))
    (fastrevert--file-buffer id (current-buffer))
    ;; The engine answers with `file-watched' once it has taken its first
    ;; look; the buffer is checked then (see `fastrevert--on-file-changed'),
    ;; which covers a change made since the file was read.  As with a new
    ;; stock watch, the buffer counts as modified on disk until its first
    ;; check, so that a check made before that look (the one that turning
    ;; an auto-revert mode on makes at once) asks the stale predicate.
    (setq auto-revert-notify-watch-descriptor (cons 'fastrevert id)
          auto-revert-notify-modified-p t)
    (when (eq mode 'poll)
      (setq fastrevert--polled t))))

(defun fastrevert--unregister ()
  "Stop the engine, or a remote watcher, watching for the current buffer."
  (fastrevert-remote-release)
  (let ((descriptor auto-revert-notify-watch-descriptor))
    (when (fastrevert--descriptor-p descriptor)
      (fastrevert--release-id (cdr descriptor))
      (fastrevert--mod-watch-remove (cdr descriptor))
      (setq auto-revert-notify-watch-descriptor nil
            auto-revert-notify-modified-p nil)
      (kill-local-variable 'fastrevert--polled))))

(defun fastrevert--adopt-current-buffer ()
  "Hand the current buffer to the engine or to stock polling, as fits.
A buffer no longer under auto-revert is released."
  (when fastrevert-mode
    (let ((target (fastrevert--target)))
      (cond ((not (auto-revert-active-p))
             (fastrevert--unregister))
            ((fastrevert--descriptor-p auto-revert-notify-watch-descriptor))
            (target
             (when auto-revert-notify-watch-descriptor
               ;; A stock file-notify watch from before; the engine replaces it.
               (fastrevert--without-advice #'auto-revert-notify-rm-watch))
             (fastrevert--register target))
            ((fastrevert-remote-adopt))
            ((or buffer-file-name
                 (not (eq buffer-stale-function #'buffer-stale--default-function)))
             (cl-pushnew (current-buffer) fastrevert--stock-buffers)
             (auto-revert-set-timer))))))

(defun fastrevert--without-advice (function)
  "Call FUNCTION, an advised auto-revert function, without fastrevert's advice."
  (let ((fastrevert--bypass t))
    (funcall function)))

;;;;; Reverting

(defun fastrevert--on-file-watched (id code data)
  "Note that the engine now watches ID; check its buffer once.
When CODE is `fastrevert--watched-check-held', a VCS operation is
changing the file's repository, and the check waits for the
`file-changed' record that comes when it ends.  DATA is the file."
  (let ((buffer (fastrevert--buffer-of id)))
    (when buffer
      (setcar (buffer-local-value 'auto-revert-notify-watch-descriptor buffer)
              'fastrevert-watched)))
  (unless (eql code fastrevert--watched-check-held)
    (fastrevert--on-file-changed id code data)))

(defun fastrevert--on-file-changed (id _code _data)
  "Note that the file watched under ID may have changed."
  (let ((buffer (fastrevert--buffer-of id)))
    (when buffer
      (with-current-buffer buffer
        (setq auto-revert-notify-modified-p t))
      (fastrevert--queue buffer))))

(defun fastrevert--queue (buffer)
  "Check BUFFER for reverting soon."
  (puthash buffer t fastrevert--pending)
  (fastrevert--schedule-check))

(defun fastrevert--schedule-check ()
  "Check the pending buffers and refresh the VC state of others, soon."
  (unless fastrevert--revert-timer
    (setq fastrevert--revert-timer
          (run-at-time 0 nil #'fastrevert--revert-pending))))

(defvar fastrevert--vc-pending (make-hash-table :test #'eq)
  "Buffers whose VC state is still to be refreshed.
They were reverted, or their repository's HEAD, branch or index
changed (see `fastrevert--on-vc-changed').")

(defconst fastrevert--vc-follow-up-seconds 10.0
  "How long after a revert's VC refresh a move of HEAD refreshes it again.
Git moves HEAD only after it has written the work tree and the index,
so a buffer reverted in between gets the old branch in its mode line.
When `auto-revert-check-vc-info' is nil, stock refreshes VC state only
after a revert; a move of HEAD this soon after one is taken as the
end of the operation that the revert saw, and refreshes it once more.")

(defvar fastrevert--vc-refreshed-at (make-hash-table :test #'eq :weakness 'key)
  "When each buffer's VC state was last refreshed after a revert.")

(defun fastrevert--on-vc-changed (id _code _data)
  "Queue the VC refresh of the buffer watched under ID.
The engine reports that the control files of the buffer's repository
changed: HEAD or its branch moved, or the index changed (watched only
while `auto-revert-check-vc-info' is non-nil).  With that option
non-nil in the buffer, its VC state is refreshed, as stock refreshes
it at every tick of polling; otherwise only if a revert refreshed it
in the last `fastrevert--vc-follow-up-seconds', as the end of the
operation that the revert saw."
  (let ((buffer (fastrevert--buffer-of id)))
    (when (and buffer
               (buffer-local-value 'buffer-file-name buffer)
               (or (buffer-local-value 'auto-revert-check-vc-info buffer)
                   (let ((refreshed (gethash buffer fastrevert--vc-refreshed-at)))
                     (and refreshed
                          (< (- (float-time) refreshed) fastrevert--vc-follow-up-seconds)))))
      (puthash buffer t fastrevert--vc-pending)
      (fastrevert--schedule-check))))

(defun fastrevert--note-revert ()
  "Record that the buffer being checked was reverted."
  (setq fastrevert--reverted t))

(defun fastrevert--note-revert-refresh (buffer)
  "Note that BUFFER's VC state is refreshed after a revert, now."
  (puthash buffer (float-time) fastrevert--vc-refreshed-at))

(defun fastrevert--defer-vc-refresh ()
  "Queue the current buffer's VC refresh for after the batch's reverts.
Stands in for `vc-refresh-state' while the stock handler runs."
  (fastrevert--note-revert-refresh (current-buffer))
  (puthash (current-buffer) t fastrevert--vc-pending))

(defun fastrevert--check-buffer (buffer)
  "Let the stock handler revert BUFFER if it is stale.
The VC refresh the handler runs after a revert is queued instead, and
done once every pending buffer matches its file: it can cost more than
the revert (a process per file for Git), and the text comes first."
  (with-current-buffer buffer
    (when (and (auto-revert-active-p)
               (fastrevert--descriptor-p auto-revert-notify-watch-descriptor))
      (cl-letf (((symbol-function 'vc-refresh-state) #'fastrevert--defer-vc-refresh))
        (auto-revert-handler)))))

(defun fastrevert--text-current-p (buffer)
  "Return non-nil unless BUFFER waits for a revert.
It waits when the engine watches its file for auto-revert and a check
would revert it now: the file changed since it was read, and the
change is yet to be reported, or the buffer yet to be checked.  The
test is the stock handler's, without its wait for a notification.
With the stock stale function, a file whose modification time is
still the buffer's is current at the cost of one `stat'.  Other
buffers, remote ones among them, are never looked at."
  (or (not (fastrevert--descriptor-p
            (buffer-local-value 'auto-revert-notify-watch-descriptor buffer)))
      (and (not (buffer-local-value 'auto-revert-tail-mode buffer))
           (memq (buffer-local-value 'buffer-stale-function buffer)
                 '(nil buffer-stale--default-function))
           (verify-visited-file-modtime buffer))
      (with-current-buffer buffer
        (not (and buffer-file-name
                  (auto-revert-active-p)
                  (if auto-revert-tail-mode
                      (and (file-readable-p buffer-file-name)
                           (/= auto-revert-tail-pos
                               (file-attribute-size (file-attributes buffer-file-name))))
                    (funcall (or buffer-stale-function #'buffer-stale--default-function) t)))))))

(defun fastrevert--refresh-vc-of (buffer)
  "Refresh BUFFER's VC state as the stock handler does after a revert.
The text comes before the state: BUFFER is refreshed only if its text
is still its file's once the batch has read Git's answers for it (see
`fastrevert--refresh-if-current').  Return non-nil if BUFFER shows its
refreshed state."
  (let ((read-before (fastrevert-vc-fetch-for buffer)))
    (with-current-buffer buffer
      (fastrevert--refresh-if-current
       (lambda () (fastrevert--call-as-revert #'vc-refresh-state))
       #'fastrevert--text-current-p read-before))))

(defvar fastrevert--deferring-vc nil
  "Non-nil while the VC refreshes of a call are put off to its end.")

(defun fastrevert--refresh-vc-of-all (buffers &optional yield)
  "Refresh the VC state of the live BUFFERS as one batch.
Their Git processes are shared (see `fastrevert-vc-call-with-batch').
Non-nil YIELD means stop at pending input when
`auto-revert-stop-on-user-input' is non-nil."
  (fastrevert--call-as-batch
   (lambda ()
     (fastrevert-vc-call-with-batch
      buffers
      (lambda ()
        (let ((refresh (fastrevert--in-batch #'fastrevert--refresh-vc-of)))
          (while (and buffers
                      (not (and yield auto-revert-stop-on-user-input (input-pending-p))))
            (let ((buffer (pop buffers)))
              (when (buffer-live-p buffer)
                (with-demoted-errors "fastrevert: %S"
                  (funcall refresh buffer)))))))))))

(defconst fastrevert--vc-early-minimum 100
  "The fewest buffers whose VC refresh is due that get their mode lines early.
Below that, refreshing them all costs less than the second pair of Git
processes that showing them early takes.")

(defconst fastrevert--vc-early-pause 0.01
  "Seconds between showing mode lines early and the full VC refresh.
Long enough for Emacs to redisplay them.")

(defvar fastrevert--vc-shown-early nil
  "Non-nil when the pending buffers' mode lines were shown early.
Their full VC refresh comes next, without another early showing.")

(defun fastrevert--show-vc-early (due refresh)
  "Show the mode lines of many pending buffers before their full VC refresh.
Call this in a batch for DUE, the buffers of `fastrevert--vc-pending'.
When at least `fastrevert--vc-early-minimum' of them are pending and
they were not just shown early, refresh one buffer per group of
buffers that get the same mode line, give its `vc-mode' to the others
of the group, and return non-nil: the others' full refresh follows
after `fastrevert--vc-early-pause' (see `fastrevert-vc-show-early').
REFRESH refreshes one buffer.  Otherwise return nil, and clear the
mark of an early showing."
  (if (or fastrevert--vc-shown-early
          (< (hash-table-count fastrevert--vc-pending) fastrevert--vc-early-minimum))
      (setq fastrevert--vc-shown-early nil)
    (let ((done (fastrevert-vc-show-early
                 due
                 (lambda (buffer)
                   (with-demoted-errors "fastrevert: %S" (funcall refresh buffer)))
                 #'fastrevert--text-current-p)))
      (dolist (buffer (car done)) (remhash buffer fastrevert--vc-pending))
      (setq fastrevert--vc-shown-early (and (cdr done) t)))))

(defun fastrevert--call-deferring-vc (function)
  "Call FUNCTION, doing the VC refreshes it asks for as one batch at its end.
The stock handler refreshes the VC state of each buffer it reverts.  A
call that checks many buffers at once, such as `auto-revert-buffers'
\(which Magit calls after each Git command), then refreshes them
together before it returns, with the Git processes of one batch."
  (if fastrevert--deferring-vc
      (funcall function)
    (let ((queue (make-hash-table :test #'eq)))
      (unwind-protect
          (let ((fastrevert--deferring-vc t))
            (cl-letf (((symbol-function 'vc-refresh-state)
                       (lambda ()
                         (fastrevert--note-revert-refresh (current-buffer))
                         (puthash (current-buffer) t queue))))
              (funcall function)))
        (when (> (hash-table-count queue) 0)
          (fastrevert--refresh-vc-of-all (fastrevert--queued queue)))))))

;; Emacs 31's name of `revert-buffer-in-progress-p'.
(defvar revert-buffer-in-progress)

(defun fastrevert--call-as-revert (function)
  "Call FUNCTION as `revert-buffer' would, and return its value.
The variable that says a revert is in progress is bound non-nil, as
the stock handler binds it around its VC refresh; VC then spares the
repository's locks.  Emacs 31 renamed `revert-buffer-in-progress-p'
to `revert-buffer-in-progress' and keeps the old name as an alias;
both are bound, which in older Emacsen binds the new name to no
effect."
  (with-suppressed-warnings ((obsolete revert-buffer-in-progress-p))
    (let ((revert-buffer-in-progress t)
          (revert-buffer-in-progress-p t))
      (funcall function))))

(defun fastrevert--check-pending ()
  "Check every pending buffer; return non-nil once none is left.
If some were checked and VC refreshes follow, Emacs redisplays the new
texts first."
  (or (zerop (hash-table-count fastrevert--pending))
      (when (fastrevert--work-through fastrevert--pending
                                      (fastrevert--in-batch #'fastrevert--check-buffer)
                                      "fastrevert: reverting buffers...")
        (unless (or noninteractive (zerop (hash-table-count fastrevert--vc-pending)))
          (redisplay))
        t)))

(defun fastrevert--revert-pending ()
  "Check every pending buffer, then refresh the VC state of the others due.
Those are the reverted buffers and those whose repository changed (see
`fastrevert--on-vc-changed').  Visible buffers go first, and Emacs
redisplays the new texts before the VC refreshes start, which share
their Git processes (see `fastrevert-vc-call-with-batch').  When
`auto-revert-stop-on-user-input' is non-nil, stop at pending input and
resume as soon as Emacs is idle."
  (setq fastrevert--revert-timer nil)
  (let ((start (float-time)))
    (unwind-protect
        (let ((fastrevert--dominating-cache (make-hash-table :test #'equal)))
          ;; One batch setting for both halves: a garbage collection
          ;; between them would only delay the VC refreshes.
          (save-match-data
            (fastrevert--call-as-batch
             (lambda ()
               (when (fastrevert--check-pending)
                 (let ((due (fastrevert--queued fastrevert--vc-pending)))
                   (fastrevert-vc-call-with-batch
                    due
                    (lambda ()
                      (let ((refresh (fastrevert--in-batch #'fastrevert--refresh-vc-of)))
                        (unless (fastrevert--show-vc-early due refresh)
                          (fastrevert--work-through fastrevert--vc-pending refresh
                                                    "fastrevert: refreshing VC state...")))))))))))
      (setq fastrevert--pending (fastrevert--fresh-if-large fastrevert--pending)
            fastrevert--vc-pending (fastrevert--fresh-if-large fastrevert--vc-pending))
      (when (and (not fastrevert--revert-timer)
                 (or (> (hash-table-count fastrevert--pending) 0)
                     (> (hash-table-count fastrevert--vc-pending) 0)))
        (setq fastrevert--revert-timer
              (if fastrevert--vc-shown-early
                  ;; Not idle: Emacs is idle already, and an idle timer
                  ;; would run before the mode lines are redisplayed.
                  (run-at-time fastrevert--vc-early-pause nil #'fastrevert--revert-pending)
                (run-with-idle-timer 0 nil #'fastrevert--revert-pending))))
      (setq fastrevert--main-thread-seconds
            (+ fastrevert--main-thread-seconds (- (float-time) start))))))

;;;;; Advice on the stock machinery

(defun fastrevert--add-watch-advice (function)
  "Watch through the engine where it can, else call FUNCTION (stock)."
  (let ((target (and (not fastrevert--bypass) (fastrevert--target))))
    (cond ((and fastrevert-mode target (not auto-revert-notify-watch-descriptor))
           (fastrevert--register target))
          ((and fastrevert-mode (not fastrevert--bypass) (fastrevert-remote-adopt)))
          (t (funcall function)))))

(defun fastrevert--rm-watch-advice (function)
  "Release an engine watch, or call FUNCTION (stock) for any other."
  (if (and (not fastrevert--bypass)
           (or (fastrevert--descriptor-p auto-revert-notify-watch-descriptor)
               (fastrevert-remote--descriptor-p auto-revert-notify-watch-descriptor)))
      (fastrevert--unregister)
    (funcall function)))

(defun fastrevert--stock-buffers-live ()
  "Return the auto-reverted buffers left to stock polling, pruned."
  (setq fastrevert--stock-buffers
        (cl-delete-if-not (lambda (buffer)
                            (and (buffer-live-p buffer)
                                 (with-current-buffer buffer
                                   (and (auto-revert-active-p)
                                        (not (fastrevert--descriptor-p
                                              auto-revert-notify-watch-descriptor))))))
                          fastrevert--stock-buffers)))

(defun fastrevert--stock-polled-buffers ()
  "Return the buffers left to the ticks of stock polling.
These are the buffers the engine cannot watch, less those with a
notification watch when `auto-revert-avoid-polling' is non-nil."
  (cl-remove-if (lambda (buffer)
                  (and auto-revert-avoid-polling
                       (buffer-local-value 'auto-revert-notify-watch-descriptor buffer)))
                (fastrevert--stock-buffers-live)))

(defvar fastrevert--checking-now nil
  "Non-nil while a call of `auto-revert-buffers' reaches the engine's buffers.
Bound by `fastrevert--buffers-advice' for any call of it but a tick
of stock polling.")

(defun fastrevert--covered-buffers ()
  "Return the buffers a call of `auto-revert-buffers' covers.
The rule is stock's: every buffer under auto-revert when
`global-auto-revert-mode' is on, else `auto-revert-buffer-list', which
a caller may have narrowed (as Magit does); with
`auto-revert-avoid-polling', less the buffers with a notification
watch.  A buffer the engine watches counts as one with such a watch
unless a check is owed to it: its first since it was adopted, one for
a change the engine reported, or any, for a file the engine polls."
  (let ((candidates (if global-auto-revert-mode
                        (cl-remove-if-not (lambda (buffer)
                                            (with-current-buffer buffer (auto-revert-active-p)))
                                          (buffer-list))
                      auto-revert-buffer-list)))
    (if (not auto-revert-avoid-polling)
        candidates
      (cl-remove-if (lambda (buffer)
                      (and (buffer-live-p buffer)
                           (with-current-buffer buffer
                             (and auto-revert-notify-watch-descriptor
                                  (not (and (fastrevert--descriptor-p
                                             auto-revert-notify-watch-descriptor)
                                            (or auto-revert-notify-modified-p
                                                fastrevert--polled)))))))
                    candidates))))

(defun fastrevert--polled-buffers-advice (function)
  "Return the buffers for stock polling; FUNCTION is the stock version.
With `fastrevert-mode' on, a tick of stock polling gets the buffers the
engine cannot watch, and any other call of `auto-revert-buffers' every
buffer it covers (see `fastrevert--covered-buffers')."
  (cond ((or fastrevert--bypass (not fastrevert-mode)) (funcall function))
        (fastrevert--checking-now (fastrevert--covered-buffers))
        (t (fastrevert--stock-polled-buffers))))

(defun fastrevert--need-polling-advice (function)
  "Return non-nil if stock polling is still needed; FUNCTION is stock's."
  (if (or fastrevert--bypass (not fastrevert-mode))
      (funcall function)
    (and (fastrevert--stock-polled-buffers) t)))

(defconst fastrevert--advice
  '((auto-revert-notify-add-watch . fastrevert--add-watch-advice)
    (auto-revert-notify-rm-watch . fastrevert--rm-watch-advice)
    (auto-revert--polled-buffers . fastrevert--polled-buffers-advice)
    (auto-revert--need-polling-p . fastrevert--need-polling-advice)
    (auto-revert-buffers . fastrevert--buffers-advice)
    (auto-revert-handler . fastrevert--handler-advice)
    (auto-revert-set-timer . fastrevert--set-timer-advice))
  "Stock auto-revert functions and the :around advice fastrevert puts on them.")

(defconst fastrevert--watched-settings
  '(auto-revert-use-notify auto-revert-notify-exclude-dir-regexp
    auto-revert-interval auto-revert-avoid-polling auto-revert-remote-files
    auto-revert-check-vc-info fastrevert-settle-delay fastrevert-vc-hold-limit)
  "Settings whose change makes fastrevert re-register its buffers.")

;;;;; Settings

(defun fastrevert--configure-engine ()
  "Pass the current intervals to the engine."
  (fastrevert--mod-watch-configure auto-revert-interval fastrevert-settle-delay
                                   (not auto-revert-avoid-polling))
  (fastrevert--mod-watch-hold-limit fastrevert-vc-hold-limit)
  (fastrevert--mod-watch-vc-info auto-revert-check-vc-info))

(defvar fastrevert--reconfigure-timer nil
  "Timer that applies changed settings, or nil.")

(defun fastrevert--setting-changed (_symbol _value _operation _where)
  "Apply a changed auto-revert setting once the change has been made."
  (unless fastrevert--reconfigure-timer
    (setq fastrevert--reconfigure-timer
          (run-at-time 0 nil #'fastrevert--reconfigure))))

(defun fastrevert--reconfigure ()
  "Apply the current settings to the engine and to every buffer."
  (setq fastrevert--reconfigure-timer nil)
  (when fastrevert-mode
    (fastrevert--configure-engine)
    (dolist (buffer (buffer-list))
      (with-current-buffer buffer
        (fastrevert--unregister)
        (fastrevert--adopt-current-buffer)))
    ;; The buffers have new watch ids.
    (fastrevert--track-visible t)
    (auto-revert-set-timer)))

;;;;; Checks that happen at once

;; Stock auto-revert checks buffers synchronously in a few places that
;; code and users rely on.  Turning `auto-revert-mode',
;; `auto-revert-tail-mode' or `global-auto-revert-mode' on checks the
;; buffers it adopts, so that a buffer whose file changed before matches
;; it when the call returns.  A call of `auto-revert-buffers' (Magit makes
;; one after each Git command) or of `auto-revert-handler' checks there
;; and then each buffer whose notification has come and each buffer
;; without a notification watch, which stock polls.  All of these run
;; the stock functions, and the advice below lets them reach the
;; engine's buffers, the engine's watch standing for stock's: a buffer is
;; owed a check when it has just been adopted or the engine has reported
;; a change, and at every call when the engine polls its file.  The ticks
;; of stock polling keep to the buffers the engine cannot watch.

(defvar fastrevert--polling-tick nil
  "Non-nil while a tick of stock polling runs `auto-revert-buffers'.")

(defun fastrevert--poll-stock-buffers ()
  "Run one tick of stock polling, which fastrevert narrows to stock's buffers.
This is the function of `auto-revert-timer' while `fastrevert-mode' is on."
  (let ((fastrevert--polling-tick t))
    (auto-revert-buffers)))

(defun fastrevert--apply-changed-settings ()
  "Apply changed auto-revert settings now if they wait for a timer."
  (when (timerp fastrevert--reconfigure-timer)
    (cancel-timer fastrevert--reconfigure-timer)
    (fastrevert--reconfigure)))

(defun fastrevert--buffers-advice (function)
  "Call FUNCTION, the stock `auto-revert-buffers', checking at once.
Except on a tick of stock polling, the call reaches the engine's
buffers too (see `fastrevert--covered-buffers'), and checks before it
returns each one owed a check.  Those that input kept it from reaching
are checked as soon as Emacs is idle.  The whole call, a caller's
filter of the buffers included (Magit has one), runs in the setting of
a batch (see `fastrevert--call-as-batch'): with many buffers, frequent
garbage collections would cost more than the checks."
  (if (or fastrevert--bypass (not fastrevert-mode) fastrevert--polling-tick)
      (funcall function)
    (fastrevert--apply-changed-settings)
    (prog1 (let ((fastrevert--checking-now t))
             (fastrevert--call-as-batch
              (lambda () (fastrevert--call-deferring-vc function))))
      (dolist (buffer auto-revert-remaining-buffers)
        (when (and (buffer-live-p buffer)
                   (fastrevert--descriptor-p
                    (buffer-local-value 'auto-revert-notify-watch-descriptor buffer)))
          (fastrevert--queue buffer))))))

(defvar fastrevert--held (make-hash-table :test #'eq)
  "Buffers whose check `inhibit-auto-revert' put off.
Each is checked once it leaves `inhibit-auto-revert-buffers'.")

(defvar fastrevert--release-timer nil
  "Timer that checks the held buffers released since, or nil.")

(defun fastrevert--inhibited-p (buffer)
  "Return non-nil if auto-revert is inhibited in BUFFER.
Emacs 31 keeps such buffers in `inhibit-auto-revert-buffers' (see
`inhibit-auto-revert'); older Emacsen have no such list."
  (and (boundp 'inhibit-auto-revert-buffers)
       (memq buffer (symbol-value 'inhibit-auto-revert-buffers))))

(defun fastrevert--inhibition-changed (_symbol _value _operation _where)
  "Check the held buffers once `inhibit-auto-revert-buffers' has changed."
  (when (and (> (hash-table-count fastrevert--held) 0)
             (not fastrevert--release-timer))
    (setq fastrevert--release-timer
          (run-at-time 0 nil #'fastrevert--release-held))))

(defun fastrevert--release-held ()
  "Queue the check of every held buffer no longer inhibited."
  (setq fastrevert--release-timer nil)
  (let ((released nil))
    (maphash (lambda (buffer _)
               (unless (and (buffer-live-p buffer) (fastrevert--inhibited-p buffer))
                 (push buffer released)))
             fastrevert--held)
    (dolist (buffer released)
      (remhash buffer fastrevert--held)
      (when (buffer-live-p buffer)
        (fastrevert--queue buffer)))))

(defun fastrevert--handler-advice (function)
  "Check the current buffer with FUNCTION, the stock `auto-revert-handler'.
The engine's watch counts as stock's notification watch: the handler
asks the buffer's stale predicate when the engine has reported a
change or the buffer awaits its first check.  A file the engine polls
has no such watch in stock, so its buffer is checked whenever the
handler runs.  A buffer in `inhibit-auto-revert-buffers' is not
checked but held, and checked once it leaves that list.  A revert
counts in `fastrevert-stats'."
  (let ((buffer (current-buffer)))
    (cond ((or fastrevert--bypass (not fastrevert-mode)
               (not (fastrevert--descriptor-p auto-revert-notify-watch-descriptor)))
           (funcall function))
          ((fastrevert--inhibited-p buffer)
           (puthash buffer t fastrevert--held))
          (t
           (when fastrevert--polled
             (setq auto-revert-notify-modified-p t))
           ;; The check made here is the one the buffer waited for.
           (when auto-revert-notify-modified-p
             (remhash buffer fastrevert--pending))
           (let ((fastrevert--reverted nil))
             (prog1 (funcall function)
               (when fastrevert--reverted
                 (fastrevert--count :reverts))))))))

(defun fastrevert--set-timer-advice (function)
  "Call FUNCTION, the stock `auto-revert-set-timer', as fastrevert needs.
Settings changed since are applied first, as the stock command
promises for `auto-revert-interval'; the polling timer, if any, then
runs `fastrevert--poll-stock-buffers'."
  (if (or fastrevert--bypass (not fastrevert-mode))
      (funcall function)
    (fastrevert--apply-changed-settings)
    (prog1 (funcall function)
      (when (timerp auto-revert-timer)
        (timer-set-function auto-revert-timer #'fastrevert--poll-stock-buffers)))))

;;;;; The mode

(defun fastrevert--enable ()
  "Move auto-revert onto the engine."
  (fastrevert--engine-ensure)
  ;; A later engine, started anew, gets every watch back.
  (add-hook 'fastrevert--engine-started-hook #'fastrevert--reconfigure)
  (fastrevert--configure-engine)
  (setf (alist-get 'file-changed fastrevert--record-handlers) #'fastrevert--on-file-changed)
  (setf (alist-get 'file-watched fastrevert--record-handlers) #'fastrevert--on-file-watched)
  (setf (alist-get 'vc-changed fastrevert--record-handlers) #'fastrevert--on-vc-changed)
  (pcase-dolist (`(,symbol . ,advice) fastrevert--advice)
    (advice-add symbol :around advice))
  (advice-add 'auto-revert--global-add-current-buffer :after #'fastrevert--adopt-current-buffer)
  (advice-add 'locate-dominating-file :around #'fastrevert--locate-dominating-file-advice)
  (add-hook 'auto-revert-mode-hook #'fastrevert--adopt-current-buffer)
  (add-hook 'auto-revert-tail-mode-hook #'fastrevert--adopt-current-buffer)
  (add-hook 'after-set-visited-file-name-hook #'fastrevert--adopt-current-buffer t)
  (add-hook 'after-revert-hook #'fastrevert--note-revert)
  ;; Where stock gives each watched buffer a local hook, one global one serves.
  (add-hook 'kill-buffer-hook #'fastrevert--unregister)
  (dolist (symbol fastrevert--watched-settings)
    (add-variable-watcher symbol #'fastrevert--setting-changed))
  (add-variable-watcher 'inhibit-auto-revert-buffers #'fastrevert--inhibition-changed)
  (dolist (buffer (buffer-list))
    (with-current-buffer buffer
      (fastrevert--adopt-current-buffer)))
  (fastrevert--track-visible t)
  (auto-revert-set-timer)
  ;; Replacing the stock watches drops the notifications they had queued;
  ;; one check now covers every change made before the engine's watches.
  (when (or global-auto-revert-mode auto-revert-buffer-list)
    (auto-revert-buffers)))

(defun fastrevert--disable ()
  "Give auto-revert back to the stock machinery."
  (remove-hook 'fastrevert--engine-started-hook #'fastrevert--reconfigure)
  (dolist (symbol fastrevert--watched-settings)
    (remove-variable-watcher symbol #'fastrevert--setting-changed))
  (remove-variable-watcher 'inhibit-auto-revert-buffers #'fastrevert--inhibition-changed)
  (fastrevert--track-visible nil)
  (dolist (buffer (buffer-list))
    (with-current-buffer buffer
      (fastrevert--unregister)))
  (fastrevert-remote-stop-all)
  (pcase-dolist (`(,symbol . ,advice) fastrevert--advice)
    (advice-remove symbol advice))
  (advice-remove 'auto-revert--global-add-current-buffer #'fastrevert--adopt-current-buffer)
  (advice-remove 'locate-dominating-file #'fastrevert--locate-dominating-file-advice)
  (fastrevert-vc-unadvise)
  (remove-hook 'auto-revert-mode-hook #'fastrevert--adopt-current-buffer)
  (remove-hook 'auto-revert-tail-mode-hook #'fastrevert--adopt-current-buffer)
  (remove-hook 'after-set-visited-file-name-hook #'fastrevert--adopt-current-buffer)
  (remove-hook 'after-revert-hook #'fastrevert--note-revert)
  (remove-hook 'kill-buffer-hook #'fastrevert--unregister)
  (setf (alist-get 'file-changed fastrevert--record-handlers nil t) nil)
  (setf (alist-get 'file-watched fastrevert--record-handlers nil t) nil)
  (setf (alist-get 'vc-changed fastrevert--record-handlers nil t) nil)
  (fastrevert--forget-watched-buffers)
  (clrhash fastrevert--pending)
  (clrhash fastrevert--vc-pending)
  (setq fastrevert--vc-shown-early nil)
  (clrhash fastrevert--held)
  (clrhash fastrevert--vc-refreshed-at)
  (setq fastrevert--stock-buffers nil)
  (dolist (timer (list fastrevert--revert-timer fastrevert--reconfigure-timer
                       fastrevert--release-timer))
    (when (timerp timer) (cancel-timer timer)))
  (setq fastrevert--revert-timer nil
        fastrevert--reconfigure-timer nil
        fastrevert--release-timer nil)
  ;; Stock auto-revert adds its file-notify watches as it polls; one pass
  ;; now restores them and the timer at once.
  (auto-revert-set-timer)
  (when (or global-auto-revert-mode auto-revert-buffer-list)
    (auto-revert-buffers)))

(defvar fastrevert-module--buffer-name)
(defun fastrevert--enable-after-build ()
  "Turn `fastrevert-mode' on, now that its module has been built."
  (fastrevert-mode 1)
  (message "The fastrevert module is built and loaded; fastrevert-mode is on"))

;;;###autoload
(define-minor-mode fastrevert-mode
  "Toggle fastrevert's native engine for auto-revert.
With this global mode on, the buffers that `auto-revert-mode',
`auto-revert-tail-mode' and `global-auto-revert-mode' manage are
watched by fastrevert's engine thread instead of by `file-notify' and
the polling timer.  Nothing runs on the main thread while no file
changes; when one does, its buffer is checked and reverted by the
stock machinery, so every `auto-revert-*' setting keeps its meaning.
What stock auto-revert checks at once is still checked at once:
turning an auto-revert mode on checks the buffers it adopts, and a
call of `auto-revert-buffers' the buffers whose change was reported
and those whose files are polled.  Remote buffers share one watcher
per Tramp connection; those whose method runs no processes, and
non-file buffers that cannot be notified, keep stock polling.
Turning the mode off restores the stock behavior.

Turning the mode on loads the native module.  A missing module is
built first (see `fastrevert-always-compile-module'), in the
background: the mode stays off meanwhile, and comes on when the
module is loaded."
  :global t
  :group 'fastrevert
  (cond ((not fastrevert-mode) (fastrevert--disable))
        ((condition-case err
             (fastrevert--module-ready #'fastrevert--enable-after-build)
           (error (setq fastrevert-mode nil)
                  ;; Said as the user should read it: what to do.
                  (if (memq (car err) fastrevert--module-errors)
                      (user-error "%s" (cadr err))
                    (signal (car err) (cdr err)))))
         (fastrevert--enable))
        (t
         (setq fastrevert-mode nil)
         (message "Building the fastrevert module (buffer %s); fastrevert-mode comes \
on when it is loaded" fastrevert-module--buffer-name))))

(defun fastrevert-unload-function ()
  "Turn fastrevert off, for `unload-feature' of this library.
The mode is turned off, and fastrevert's other libraries are
unloaded: its processes are killed (their sentinels are told), and
the engine is stopped and its wake process deleted.  Return nil, so
that `unload-feature' goes on to remove the rest."
  (when fastrevert-mode (fastrevert-mode -1))
  ;; Each library goes before the ones it needs; the engine's goes last,
  ;; once no process is left to tell of its end.
  (dolist (feature '(fastrevert-lsp fastrevert-report fastrevert-remote
                     fastrevert-remote-revert fastrevert-remote-watcher fastrevert-call
                     fastrevert-process fastrevert-child fastrevert-decode fastrevert-compile
                     fastrevert-watch fastrevert-batch fastrevert-engine))
    (when (featurep feature) (unload-feature feature t)))
  nil)

(provide 'fastrevert)

;; The process API and the report are part of the package proper.
(require 'fastrevert-process)
(require 'fastrevert-call)
(autoload 'fastrevert-report "fastrevert-report" "Show fastrevert's counters." t)
(autoload 'fastrevert-lsp-mode "fastrevert-lsp" "Toggle language servers on the engine." t)

;;; fastrevert.el ends here
