;;; fastrevert-burst-helpers.el --- Bursts of external changes for the burst tests -*- lexical-binding: t; -*-

;;; Commentary:

;; A checkout-like rewrite of many visited files, shared by the burst
;; tests (one file each, so that ctest runs them side by side).

;;; Code:

(require 'fastrevert-test-helpers)
(require 'fastrevert)
(require 'autorevert)

(defun fastrevert-burst-helpers--describe (stale records)
  "Say why the STALE buffers may be stale, for the log of a failed run.
RECORDS maps each buffer to the times the engine reported its file
changed, newest first."
  (message "%d stale buffers; engine %S" (length stale) (fastrevert-stats))
  (dolist (buffer (cl-subseq stale 0 (min 10 (length stale))))
    (with-current-buffer buffer
      (let ((attributes (file-attributes buffer-file-name)))
        (message "stale %s: text %S, read at %S, file %S of %S bytes, changed %S, \
modified %S, watched %S, pending %S, reports %S"
                 buffer-file-name
                 (buffer-substring-no-properties (point-min) (min (point-max) 20))
                 (format-time-string "%T.%N" (visited-file-modtime))
                 (format-time-string "%T.%N" (file-attribute-modification-time attributes))
                 (file-attribute-size attributes)
                 (format-time-string "%T.%N" (file-attribute-status-change-time attributes))
                 (buffer-modified-p)
                 (fastrevert--watching-p buffer)
                 (gethash buffer fastrevert--pending)
                 (mapcar (lambda (time) (format-time-string "%T.%N" time))
                         (gethash buffer records)))))))

(defun fastrevert-burst-helpers-run (directories files-per-directory)
  "Rewrite FILES-PER-DIRECTORY files in each of DIRECTORIES new directories.
Every file is visited under `global-auto-revert-mode' and `fastrevert-mode'.
Return the number of buffers still stale when the deadline passes."
  (fastrevert-test-with-temp-dir root
    (let ((auto-revert-verbose nil)
          (auto-revert-use-notify t)
          (auto-revert-avoid-polling t)
          (fastrevert-settle-delay 0.03)
          (buffers nil)
          (records (make-hash-table :test #'eq))
          (record nil))
      (setq record (lambda (id &rest _)
                     (let ((buffer (fastrevert--buffer-of id)))
                       (when buffer
                         (puthash buffer (cons (float-time) (gethash buffer records))
                                  records)))))
      (dotimes (d directories)
        (let ((dir (expand-file-name (format "d%03d" d) root)))
          (make-directory dir)
          (unless (zerop (call-process
                          "sh" nil nil nil "-c"
                          "cd \"$1\" && i=0; while [ $i -lt \"$2\" ]; do echo old > f$i.txt; i=$((i+1)); done"
                          "sh" dir (number-to-string files-per-directory)))
            (error "Could not create files in %s" dir))))
      (unwind-protect
          (progn
            (fastrevert-mode 1)
            (global-auto-revert-mode 1)
            ;; Version control plays no part here, and looking for it
            ;; would only slow down visiting 10,000 files.  Each file is
            ;; new and has one name, so the buffer visiting it, if any, is
            ;; the one `get-file-buffer' finds; stock `find-buffer-visiting'
            ;; would also walk every buffer to compare truenames and inode
            ;; numbers, which makes visiting 10,000 files take minutes, and
            ;; that is not what these tests are about.  Nor are buffer
            ;; names: uniquify walks every buffer in Lisp for each buffer
            ;; made and each one killed, which took up to half of the test's
            ;; time.  The buffers keep Emacs's plain names ("f1.txt<2>").
            (cl-letf (((symbol-function 'find-buffer-visiting)
                       (lambda (file &optional _predicate) (get-file-buffer file))))
              (let ((vc-handled-backends nil)
                    (uniquify-buffer-name-style nil))
                (dolist (dir (directory-files root t "\\`d"))
                  (dolist (file (directory-files dir t "\\.txt\\'" t))
                    (push (find-file-noselect file) buffers)))))
            (should (= (length buffers) (* directories files-per-directory)))
            ;; Let the engine take its first look at every file, and the
            ;; initial checks of the new buffers finish.
            (should (fastrevert-test-wait-for
                     (lambda () (and (cl-every (lambda (buffer)
                                                 (fastrevert--watching-p buffer))
                                               buffers)
                                     (not fastrevert--revert-timer)
                                     (zerop (hash-table-count fastrevert--pending))))
                     120))
            ;; From here on, the engine's reports of each buffer are
            ;; counted, for the message that describes a failure.
            (advice-add 'fastrevert--on-file-changed :before record)
            ;; The burst: every file rewritten by another program at once.
            (unless (zerop (call-process "sh" nil nil nil "-c"
                                         "for f in \"$1\"/d*/*.txt; do echo new > \"$f\"; done"
                                         "sh" root))
              (error "The rewrite failed"))
            (let ((stale-p (lambda (buffer)
                             (not (equal (with-current-buffer buffer
                                           (buffer-substring-no-properties
                                            (point-min) (point-max)))
                                         "new\n")))))
              (fastrevert-test-wait-for
               (lambda () (not (cl-some stale-p buffers)))
               240)
              (let ((stale (cl-remove-if-not stale-p buffers)))
                (when stale
                  (fastrevert-burst-helpers--describe stale records))
                (length stale))))
        (advice-remove 'fastrevert--on-file-changed record)
        (global-auto-revert-mode -1)
        (fastrevert-mode -1)
        (dolist (buffer buffers) (kill-buffer buffer))))))

(provide 'fastrevert-burst-helpers)

;;; fastrevert-burst-helpers.el ends here
