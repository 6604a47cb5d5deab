;;; fastrevert-report.el --- Show what fastrevert has done -*- lexical-binding: t; -*-

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; `fastrevert-report' shows the counters of `fastrevert-stats' in a
;; help buffer, one per line, each with what it counts in words.  The
;; engine's inner counters (commands, results, wake-ups, drains) come
;; last, under a heading of their own, for whoever looks at how the
;; engine and Emacs talk.

;;; Code:

(require 'fastrevert)

(defconst fastrevert--report-descriptions
  '((:watches . "directories watched by the kernel")
    (:polled-files . "files polled in the background")
    (:kernel-events . "kernel events read")
    (:events-dropped-natively . "events for unvisited files, dropped natively")
    (:batches . "batches of changes delivered")
    (:reverts . "buffers reverted")
    (:overflows . "kernel queue overflows (each caused a full re-scan)")
    (:main-thread-ms . "milliseconds spent on Emacs's main thread")
    (:processes . "processes started")
    (:bytes-read . "bytes of process output read")
    (:read-pauses . "pauses in reading a stream that came in small writes")
    (:backlog-bytes . "bytes of process output waiting for Emacs now")
    (:backlog-overrun . "most bytes a process had waiting beyond its backlog")
    (:vc-batches . "repositories asked about for a batch of VC refreshes")
    (:vc-processes . "Git processes those batches started")
    (:vc-answered . "Git commands of VC refreshes answered without a process")
    (:remote-watchers . "remote watchers running, one per Tramp connection")
    (:remote-watchers-started . "remote watchers started")
    (:remote-lines . "lines of the remote watchers' output handled")
    (:remote-reverts . "remote buffers reverted")
    (:remote-line-ms . "milliseconds Emacs spent on those lines")
    (:remote-check-ms . "milliseconds Emacs spent checking and reverting remote buffers"))
  "The counters `fastrevert-report' shows first, with what each counts.")

(defconst fastrevert--report-engine-descriptions
  '((:commands . "requests Emacs sent to the engine thread")
    (:records . "results the engine thread handed back")
    (:wakes . "times the engine woke Emacs up to take results")
    (:drains . "times Emacs took the waiting results")
    (:drain-ns . "milliseconds Emacs spent handling them (part of the main-thread time)"))
  "The engine's inner counters, with what each counts.
They tell how the engine thread and Emacs talk rather than what was
done; `fastrevert-report' shows them last.")

(defun fastrevert--report-value (key value)
  "Return VALUE of counter KEY as text for the report."
  (cond ((eq key :drain-ns) (format "%.1f" (/ value 1e6)))
        ((floatp value) (format "%.1f" value))
        (t (format "%s" value))))

(defun fastrevert--report-lines (stats descriptions)
  "Print the counters of STATS that DESCRIPTIONS describe, in their order."
  (dolist (entry descriptions)
    (let ((value (plist-get stats (car entry))))
      (when value
        (princ (format "%14s  %s\n" (fastrevert--report-value (car entry) value)
                       (cdr entry)))))))

;;;###autoload
(defun fastrevert-report ()
  "Show fastrevert's counters in a help buffer, each with what it counts.
`fastrevert-stats' returns the same counters as a plist."
  (interactive)
  (let ((stats (fastrevert-stats)))
    (with-help-window "*fastrevert-report*"
      (princ (format "fastrevert %s, engine %s\n\n" fastrevert-version
                     (if (fastrevert--engine-live-p) "running" "stopped")))
      (fastrevert--report-lines stats fastrevert--report-descriptions)
      (when (cl-some (lambda (entry) (plist-member stats (car entry)))
                     fastrevert--report-engine-descriptions)
        (princ "\nBetween the engine thread and Emacs:\n\n")
        (fastrevert--report-lines stats fastrevert--report-engine-descriptions)))))

(provide 'fastrevert-report)

;;; fastrevert-report.el ends here
