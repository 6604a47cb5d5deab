;;; fastrevert-report.el --- Show what fastrevert has done -*- lexical-binding: t; -*-

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; `fastrevert-report' shows the counters of `fastrevert-stats' in a
;; help buffer, one per line with what it counts.

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
    (:vc-batches . "repositories asked about for a batch of VC refreshes")
    (:vc-processes . "Git processes those batches started")
    (:vc-answered . "Git commands of VC refreshes answered without a process"))
  "The counters `fastrevert-report' shows first, with what each counts.")

;;;###autoload
(defun fastrevert-report ()
  "Show fastrevert's counters in a help buffer."
  (interactive)
  (let ((stats (fastrevert-stats)))
    (with-help-window "*fastrevert-report*"
      (princ (format "fastrevert %s, engine %s\n\n" fastrevert-version
                     (if (fastrevert--engine-live-p) "running" "stopped")))
      (dolist (entry fastrevert--report-descriptions)
        (let ((value (plist-get stats (car entry))))
          (princ (format "%14s  %s\n"
                         (if (floatp value) (format "%.1f" value) value)
                         (cdr entry)))))
      (let ((rest stats))
        (while rest
          (unless (assq (car rest) fastrevert--report-descriptions)
            (princ (format "%14s  %s\n" (cadr rest)
                           (substring (symbol-name (car rest)) 1))))
          (setq rest (cddr rest)))))))

(provide 'fastrevert-report)

;;; fastrevert-report.el ends here
