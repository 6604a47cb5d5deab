;;; fastrevert-bench-memory.el --- What a watched file costs, stock and fastrevert  -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;;; Commentary:

;; The memory section of `make bench': 10,000 visited files (1,000 in
;; the quick run), and what Emacs grows by when they come under
;; auto-revert, stock `global-auto-revert-mode' with notification
;; against `fastrevert-mode'.  Each variant runs in an Emacs of its own,
;; so that memory freed by one cannot be reused by the next: the child
;; visits the files, collects garbage, reads its resident set size, turns
;; the variant on, waits until every buffer is watched, collects garbage
;; again and reads it once more.  The growth is split into the Lisp
;; heap (what `garbage-collect' reports live) and the rest, which is
;; malloc'd memory: the engine's tables, file-notify's and the kernel
;; interface's.  The mean length of the file names is printed beside it,
;; since that is the least a watched file can cost.

;;; Code:

(require 'cl-lib)
(require 'autorevert)
(require 'fastrevert-bench)

(declare-function fastrevert-mode "fastrevert" (&optional arg))
(declare-function fastrevert--watching-p "fastrevert-watch" (buffer))
(defvar fastrevert--revert-timer)
(defvar fastrevert--pending)

(defconst fastrevert-bench-memory--counts '(10000 1000)
  "Files visited, as (DEFAULT QUICK).")

(defun fastrevert-bench-memory--rss-kib ()
  "Return this Emacs's resident set size in KiB."
  (with-temp-buffer
    (insert-file-contents "/proc/self/status")
    (re-search-forward "^VmRSS:[ \t]*\\([0-9]+\\) kB")
    (string-to-number (match-string 1))))

(defun fastrevert-bench-memory--lisp-bytes ()
  "Collect garbage and return the bytes of live Lisp data."
  (cl-loop for (_name size used) in (garbage-collect)
           sum (* size (if (consp used) (car used) (or used 0)))))

(defun fastrevert-bench-memory--wait (predicate)
  "Wait until PREDICATE gives non-nil, for at most 300 seconds.
Signal an error when it does not."
  (let ((deadline (+ (float-time) 300)))
    (while (not (funcall predicate))
      (when (> (float-time) deadline)
        (error "The buffers were not all watched after 300 s"))
      (accept-process-output nil 0.05))))

(defun fastrevert-bench-memory-child (variant dir)
  "Measure VARIANT (\"none\", \"stock\" or \"fastrevert\") over the files in DIR.
Print a plist on standard output: the files, their names' bytes, and
the resident set size and live Lisp bytes before and after."
  (let* ((files (directory-files-recursively dir "\\.txt\\'"))
         (auto-revert-verbose nil)
         (auto-revert-use-notify t)
         (auto-revert-avoid-polling t)
         (gc-cons-threshold (* 64 1024 1024))
         (buffers (fastrevert-bench--visit files)))
    (let ((lisp-before (fastrevert-bench-memory--lisp-bytes))
          (rss-before (fastrevert-bench-memory--rss-kib)))
      (pcase variant
        ("none" nil)
        ("stock"
         (global-auto-revert-mode 1)
         (fastrevert-bench-memory--wait
          (lambda ()
            (cl-every (lambda (buffer)
                        (buffer-local-value 'auto-revert-notify-watch-descriptor buffer))
                      buffers))))
        ("fastrevert"
         (require 'fastrevert)
         (fastrevert-mode 1)
         (global-auto-revert-mode 1)
         (fastrevert-bench-memory--wait
          (lambda ()
            (and (cl-every #'fastrevert--watching-p
                           buffers)
                 (not fastrevert--revert-timer)
                 (zerop (hash-table-count fastrevert--pending)))))))
      (let ((lisp-after (fastrevert-bench-memory--lisp-bytes))
            (rss-after (fastrevert-bench-memory--rss-kib)))
        (prin1 (list :files (length files)
                     :name-bytes (apply #'+ (mapcar #'string-bytes files))
                     :rss-before rss-before :rss-after rss-after
                     :lisp-before lisp-before :lisp-after lisp-after))
        (terpri)))))

(defun fastrevert-bench-memory--measure (variant dir)
  "Run `fastrevert-bench-memory-child' for VARIANT over DIR in another Emacs.
Return its plist."
  (with-temp-buffer
    (let ((status (call-process
                   (expand-file-name invocation-name invocation-directory) nil
                   '(t nil) nil "-Q" "--batch"
                   "-L" (file-name-directory (locate-library "fastrevert"))
                   "-L" (file-name-directory (locate-library "fastrevert-bench"))
                   "-l" "fastrevert-bench-memory"
                   "--eval" (format "(fastrevert-bench-memory-child %S %S)" variant dir))))
      (unless (eql status 0)
        (error "The %s memory measurement failed with %s: %s" variant status (buffer-string)))
      (goto-char (point-min))
      (read (current-buffer)))))

(defun fastrevert-bench-memory--run (root)
  "Measure what a watched file costs under ROOT, and print the table."
  (let* ((count (if (fastrevert-bench-quick-p)
                    (nth 1 fastrevert-bench-memory--counts)
                  (car fastrevert-bench-memory--counts)))
         (dir (file-name-as-directory (expand-file-name "memory" root)))
         rows)
    (make-directory dir)
    (unwind-protect
        (progn
          (dotimes (d 10)
            (let ((subdir (expand-file-name (format "dir%d" d) dir)))
              (make-directory subdir)
              (dotimes (i (/ count 10))
                (write-region "old\n" nil (expand-file-name (format "file%d.txt" i) subdir)
                              nil 'silent))))
          (dolist (variant '("none" "stock" "fastrevert"))
            (fastrevert-bench--progress "memory: %d files, %s" count variant)
            (push (cons variant (fastrevert-bench-memory--measure variant dir)) rows)))
      (delete-directory dir t))
    (setq rows (nreverse rows))
    (fastrevert-bench--heading (format "Memory: what a watched file costs (%d visited files)"
                                       count))
    (fastrevert-bench--out
     "Each row is a fresh Emacs that visits the files, then turns auto-revert on
and waits until every buffer is watched.  Bytes per file of growth in the
resident set (RSS) and in live Lisp data; the rest is malloc'd memory.
\"none\" turns nothing on: it is the noise of collecting garbage twice.
The mean file name is %.0f bytes.\n\n"
     (let ((plist (cdar rows)))
       (/ (float (plist-get plist :name-bytes)) (plist-get plist :files))))
    (fastrevert-bench--print-table
     '("variant" "RSS growth MiB" "RSS bytes per file" "Lisp bytes per file"
       "other bytes per file")
     (mapcar (lambda (row)
               (let* ((plist (cdr row))
                      (files (plist-get plist :files))
                      (rss (* 1024 (- (plist-get plist :rss-after) (plist-get plist :rss-before))))
                      (lisp (- (plist-get plist :lisp-after) (plist-get plist :lisp-before))))
                 (list (car row)
                       (format "%.1f" (/ rss 1048576.0))
                       (format "%.0f" (/ (float rss) files))
                       (format "%.0f" (/ (float lisp) files))
                       (format "%.0f" (/ (float (- rss lisp)) files)))))
             rows))))

(add-hook 'fastrevert-bench-sections #'fastrevert-bench-memory--run 97)

(provide 'fastrevert-bench-memory)

;;; fastrevert-bench-memory.el ends here
