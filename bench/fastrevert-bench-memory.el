;;; fastrevert-bench-memory.el --- What a watched file costs, stock and fastrevert  -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;;; Commentary:

;; The memory section of `make bench': 10,000 visited files (1,000 in
;; the quick run), and what a file costs once it comes under
;; auto-revert, stock `global-auto-revert-mode' with notification
;; against `fastrevert-mode'.  Each variant runs in an Emacs of its own,
;; so that memory freed by one cannot be reused by the next.
;;
;; Turning a variant on costs some memory once, whatever the number of
;; files: fastrevert loads its Lisp and its module (with the libraries
;; the module pulls in) and starts its engine thread, with its stack
;; and malloc arena, and either variant makes a kernel watch per
;; directory.  Stock's Lisp, `autorevert' and `filenotify', is loaded
;; before anything is measured, since this file needs it.  So
;; that those one-off costs do not pass for a per-file cost, the child
;; covers the files in two steps and measures after each: first every
;; fifth buffer, which spans all ten directories, then the rest.  The
;; second step adds only files to directories already watched, so its
;; growth divided by its files is what one more watched file costs; the
;; first step's growth less its files' share at that rate is the
;; one-off cost.  Each measurement collects garbage, sums the live Lisp
;; data `garbage-collect' reports and reads the resident set size; the
;; rest of the resident set is malloc'd memory (the engine's tables,
;; file-notify's and the kernel interface's) and code.  The mean length
;; of the file names is printed beside it, since that is the least a
;; watched file can cost.
;;
;; The steps use `global-auto-revert-mode' and its own way of leaving
;; buffers out, `global-auto-revert-ignore-buffer', which both variants
;; honour: stock tests it when the mode adopts a buffer, and fastrevert
;; watches just the buffers the mode adopts.  Its default value is a
;; predicate that leaves out the buffers of the second step until that
;; step, so no buffer gets a local binding that would be made or undone
;; between two measurements.  The second step turns the mode on again:
;; the mode's body then runs as when it is first turned on, adopting
;; every buffer not yet adopted and checking them with
;; `auto-revert-buffers', which adds stock's watches, and fastrevert's
;; advice on the adoption hands them to its engine.  `auto-revert-mode'
;; in each buffer would measure something else: it keeps a list of its
;; buffers and a local `kill-buffer-hook' in each, which the global mode
;; does not, and stock's runs `auto-revert-buffers' once per buffer.

;;; Code:

(require 'cl-lib)
;; The child's waits use `cl-every' and `cl-some', which are autoloaded
;; from `cl-extra' (with `help-mode' and more, about 600 KB of Lisp
;; data); loading it with this file keeps it out of what the child
;; measures.
(require 'cl-extra)
(require 'autorevert)
(require 'fastrevert-bench)

(declare-function fastrevert-mode "fastrevert" (&optional arg))
(declare-function fastrevert--watching-p "fastrevert-watch" (buffer))
(defvar fastrevert--revert-timer)
(defvar fastrevert--pending)

(defconst fastrevert-bench-memory--counts '(10000 1000)
  "Files visited, as (DEFAULT QUICK).")

(defconst fastrevert-bench-memory--first-step-share 5
  "The first step covers one buffer in this many.")

(defvar fastrevert-bench-memory--first-step nil
  "The buffers of the first step, as a hash table of them.
It stays until the child's last measurement: dropped earlier, it would
be freed between two measurements, which would then count its bytes
less.")

(defvar fastrevert-bench-memory--second-step-p nil
  "Non-nil once the second step has begun, which covers every buffer.")

(defun fastrevert-bench-memory--ignored-p (buffer)
  "Return non-nil if `global-auto-revert-mode' is to leave BUFFER out.
This is the default value of `global-auto-revert-ignore-buffer' in
the child Emacs: it leaves out the buffers not yet covered."
  (not (or fastrevert-bench-memory--second-step-p
           (gethash buffer fastrevert-bench-memory--first-step))))

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

(defun fastrevert-bench-memory--sample ()
  "Collect garbage and return (LISP-BYTES . RSS-KIB)."
  (let ((lisp (fastrevert-bench-memory--lisp-bytes)))
    (cons lisp (fastrevert-bench-memory--rss-kib))))

(defun fastrevert-bench-memory--wait (predicate)
  "Wait until PREDICATE gives non-nil, for at most 300 seconds.
Signal an error when it does not."
  (let ((deadline (+ (float-time) 300)))
    (while (not (funcall predicate))
      (when (> (float-time) deadline)
        (error "The buffers were not all watched after 300 s"))
      (accept-process-output nil 0.05))))

(defun fastrevert-bench-memory--settled-p (variant buffers)
  "Return non-nil once VARIANT watches the files of all of BUFFERS.
For fastrevert that is once the engine reports every change to each
file and no check is left to make."
  (pcase variant
    ("stock" (cl-every (lambda (buffer)
                         (buffer-local-value 'auto-revert-notify-watch-descriptor buffer))
                       buffers))
    ("fastrevert" (and (cl-every #'fastrevert--watching-p buffers)
                       (not fastrevert--revert-timer)
                       (zerop (hash-table-count fastrevert--pending))))))

(defun fastrevert-bench-memory--cover (variant covered uncovered)
  "Have VARIANT cover the buffers COVERED, and wait until they are watched.
This turns `global-auto-revert-mode' on, or on again, unless VARIANT
is \"none\".  UNCOVERED are the buffers left out; signal an error if
auto-revert took any of them."
  (unless (equal variant "none")
    (global-auto-revert-mode 1)
    (fastrevert-bench-memory--wait
     (lambda () (fastrevert-bench-memory--settled-p variant covered)))
    (when (cl-some (lambda (buffer)
                     (buffer-local-value 'auto-revert-notify-watch-descriptor buffer))
                   uncovered)
      (error "%s watched buffers that `global-auto-revert-ignore-buffer' left out"
             variant))))

(defun fastrevert-bench-memory-child (variant dir)
  "Measure VARIANT (\"none\", \"stock\" or \"fastrevert\") over the files in DIR.
Print a plist on standard output: the files, those of the first step,
their names' bytes, and the live Lisp bytes and resident set size
before, after the first step and after the second, as the lists
:lisp and :rss-kib."
  (let* ((files (directory-files-recursively dir "\\.txt\\'"))
         (auto-revert-verbose nil)
         (auto-revert-use-notify t)
         (auto-revert-avoid-polling t)
         (gc-cons-threshold (* 64 1024 1024))
         (buffers (fastrevert-bench--visit files))
         (first-step nil)
         (second-step nil)
         (samples nil))
    (cl-loop for buffer in buffers
             for i from 0
             do (if (zerop (% i fastrevert-bench-memory--first-step-share))
                    (push buffer first-step)
                  (push buffer second-step)))
    (setq fastrevert-bench-memory--first-step
          (make-hash-table :test #'eq :size (length first-step)))
    (dolist (buffer first-step)
      (puthash buffer t fastrevert-bench-memory--first-step))
    (setq-default global-auto-revert-ignore-buffer #'fastrevert-bench-memory--ignored-p)
    (push (fastrevert-bench-memory--sample) samples)
    (when (equal variant "fastrevert")
      (require 'fastrevert)
      (fastrevert-mode 1))
    (fastrevert-bench-memory--cover variant first-step second-step)
    (push (fastrevert-bench-memory--sample) samples)
    (setq fastrevert-bench-memory--second-step-p t)
    (fastrevert-bench-memory--cover variant buffers nil)
    (push (fastrevert-bench-memory--sample) samples)
    (setq samples (nreverse samples))
    (prin1 (list :files (length files)
                 :first-step (length first-step)
                 :name-bytes (apply #'+ (mapcar #'string-bytes files))
                 :lisp (mapcar #'car samples)
                 :rss-kib (mapcar #'cdr samples)))
    (terpri)))

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

(defun fastrevert-bench-memory--costs (plist)
  "Return the costs in PLIST, a child's measurement, as a plist.
:lisp-per-file and :rss-per-file are the bytes one more watched file
costs, the second step's growth divided by its files; :lisp-once and
:rss-once the bytes of the first step's growth that its files at that
rate do not account for."
  (let* ((files (plist-get plist :files))
         (first-step (plist-get plist :first-step))
         (second-step (- files first-step))
         (result nil))
    (pcase-dolist (`(,key ,scale ,per-file ,once)
                   '((:lisp 1 :lisp-per-file :lisp-once)
                     (:rss-kib 1024 :rss-per-file :rss-once)))
      (pcase-let* ((`(,before ,first ,all) (mapcar (lambda (value) (* scale value))
                                                   (plist-get plist key)))
                   (rate (/ (float (- all first)) second-step)))
        (setq result (append (list per-file rate
                                   once (- first before (* rate first-step)))
                             result))))
    result))

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
     "Each row is a fresh Emacs that visits the files and brings them under
auto-revert in two steps, waiting after each until every buffer it covers is
watched: first every fifth file (%d, in all ten directories), then the rest.
Per file: the second step's growth of the resident set (RSS) and of live Lisp
data, divided by its files; other is RSS less Lisp (malloc'd memory).  Once:
the first step's growth less its files' share at that rate, in MiB (loading
and starting fastrevert, a watch per directory).  \"none\" turns nothing on:
it is the noise of collecting garbage and measuring.\n\n"
     (plist-get (cdar rows) :first-step))
    (fastrevert-bench--print-table
     '("variant" "once RSS MiB" "once Lisp MiB" "RSS B/file" "Lisp B/file"
       "other B/file" "name B")
     (mapcar (lambda (row)
               (let ((plist (cdr row))
                     (costs (fastrevert-bench-memory--costs (cdr row))))
                 (list (car row)
                       (format "%.2f" (/ (plist-get costs :rss-once) 1048576.0))
                       (format "%.2f" (/ (plist-get costs :lisp-once) 1048576.0))
                       (format "%d" (round (plist-get costs :rss-per-file)))
                       (format "%d" (round (plist-get costs :lisp-per-file)))
                       (format "%d" (round (- (plist-get costs :rss-per-file)
                                              (plist-get costs :lisp-per-file))))
                       (format "%d" (round (plist-get plist :name-bytes)
                                           (plist-get plist :files))))))
             rows))))

(add-hook 'fastrevert-bench-full-sections #'fastrevert-bench-memory--run 97)

(provide 'fastrevert-bench-memory)

;;; fastrevert-bench-memory.el ends here
