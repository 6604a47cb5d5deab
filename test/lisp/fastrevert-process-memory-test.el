;;; fastrevert-process-memory-test.el --- A busy Emacs hoards no process output -*- lexical-binding: t; -*-

;;; Commentary:

;; A firehose child (`yes') streams into a buffer, to a filter, and to a
;; filter under `:framing lines' while Emacs's main thread works for five
;; seconds without waiting, as a long command does.  Stock Emacs lets the
;; child block on its full pipe; so must fastrevert: what waits in the
;; engine stays within the process's backlog plus one read, memory does
;; not grow past that, the child is blocked, and it goes on once Emacs
;; waits again.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'fastrevert-test-helpers)
(require 'fastrevert)
(require 'fastrevert-process)

(defconst fastrevert-process-memory-test--one-read (* 4 1024 1024)
  "The most the engine reads at once (`kDefaultMaxReadSize').")

(defconst fastrevert-process-memory-test--backlog (* 16 1024 1024)
  "The backlog of a process that asks for none.")

(defun fastrevert-process-memory-test--meminfo (field)
  "Return FIELD of /proc/meminfo, in bytes."
  (with-temp-buffer
    (insert-file-contents "/proc/meminfo")
    (re-search-forward (concat "^" field ": *\\([0-9]+\\) kB"))
    (* 1024 (string-to-number (match-string 1)))))

(defun fastrevert-process-memory-test--rss ()
  "Return this Emacs's resident memory, in bytes."
  (with-temp-buffer
    (insert-file-contents "/proc/self/status")
    (re-search-forward "^VmRSS:[ \t]*\\([0-9]+\\) kB")
    (* 1024 (string-to-number (match-string 1)))))

(defun fastrevert-process-memory-test--written (pid)
  "Return how many bytes the process PID has written so far."
  (with-temp-buffer
    (insert-file-contents (format "/proc/%d/io" pid))
    (re-search-forward "^wchar: *\\([0-9]+\\)")
    (string-to-number (match-string 1))))

(defun fastrevert-process-memory-test--busy (seconds sample)
  "Work for SECONDS without waiting, calling SAMPLE with the seconds gone by.
SAMPLE is called about every 0.1 s."
  (let* ((start (float-time))
         (next 0.0)
         (junk nil))
    (while (< (- (float-time) start) seconds)
      ;; Work that allocates, as a command's does.
      (setq junk (make-list 100 (random)))
      (when (>= (- (float-time) start) next)
        (funcall sample (- (float-time) start))
        (setq next (+ next 0.1))))
    junk))

(defun fastrevert-process-memory-test--run (shape)
  "Stream `yes' as SHAPE says (`buffer', `filter' or `lines') past a busy Emacs."
  (let* ((buffer (and (eq shape 'buffer) (generate-new-buffer " *fastrevert-firehose*")))
         (received 0)
         (process (apply #'fastrevert-make-process
                         :name "firehose" :noquery t :coding 'utf-8-unix
                         :command '("yes" "0123456789 abcdefghij 0123456789 abcdefghij")
                         (append (if buffer
                                     (list :buffer buffer)
                                   (list :filter (lambda (_process text)
                                                   (setq received (+ received (length text))))))
                                 (and (eq shape 'lines) (list :framing 'lines)))))
         (pid (fastrevert-process-id-of process))
         (id (fastrevert--process-id process)))
    (unwind-protect
        (progn
          ;; Streaming, and taken as it comes.
          (let ((end (+ (float-time) 0.5)))
            (while (< (float-time) end) (fastrevert-accept-process-output process 0.05)))
          (should (> (fastrevert-process-memory-test--written pid) (* 1024 1024)))
          (let ((shmem (fastrevert-process-memory-test--meminfo "Shmem"))
                (rss (fastrevert-process-memory-test--rss))
                (most-waiting 0)
                (rss-at-2 nil)
                (written-at-4 nil)
                (written-at-5 nil))
            (fastrevert-process-memory-test--busy
             5 (lambda (elapsed)
                 (setq most-waiting
                       (max most-waiting (car (fastrevert--mod-process-backlog id))))
                 (cond ((and (>= elapsed 2) (not rss-at-2))
                        (setq rss-at-2 (fastrevert-process-memory-test--rss)))
                       ((and (>= elapsed 4) (not written-at-4))
                        (setq written-at-4 (fastrevert-process-memory-test--written pid)))
                       ((>= elapsed 4.9)
                        (setq written-at-5 (fastrevert-process-memory-test--written pid))))))
            (let ((shmem-growth (- (fastrevert-process-memory-test--meminfo "Shmem") shmem))
                  (rss-growth (- (fastrevert-process-memory-test--rss) rss))
                  (late-growth (- (fastrevert-process-memory-test--rss) rss-at-2))
                  (overrun (cdr (fastrevert--mod-process-backlog id))))
              (ert-info ((format "%s: most waiting %d, overrun %d, Shmem +%d, RSS +%d (+%d after 2 s), written %S %S"
                                 shape most-waiting overrun shmem-growth rss-growth late-growth
                                 written-at-4 written-at-5))
                (message "%s: most waiting %.1f MiB, overrun %.1f MiB, Shmem %+.1f MiB, RSS %+.1f MiB"
                         shape (/ most-waiting 1048576.0) (/ overrun 1048576.0)
                         (/ shmem-growth 1048576.0) (/ rss-growth 1048576.0))
                ;; Within the backlog and one read.
                (should (<= most-waiting (+ fastrevert-process-memory-test--backlog
                                            fastrevert-process-memory-test--one-read)))
                (should (<= overrun fastrevert-process-memory-test--one-read))
                (should (<= (plist-get (fastrevert-stats) :backlog-overrun)
                            fastrevert-process-memory-test--one-read))
                ;; No more memory than that, give or take what the machine's
                ;; other work does meanwhile; and none while the child is
                ;; blocked, whatever the work of the busy loop makes the
                ;; garbage collector keep.
                (should (< shmem-growth (* 48 1024 1024)))
                (should (< late-growth (* 16 1024 1024)))
                ;; The child waits on its full pipe.
                (should (equal written-at-4 written-at-5)))))
          ;; And goes on once Emacs waits again.
          (let ((before (fastrevert-process-memory-test--written pid)))
            (should (fastrevert-test-wait-for
                     (lambda ()
                       (fastrevert-accept-process-output process 0.05)
                       (> (fastrevert-process-memory-test--written pid)
                          (+ before (* 32 1024 1024))))
                     30))))
      (fastrevert-delete-process process)
      (when buffer (kill-buffer buffer)))))

(ert-deftest fastrevert-process-memory-a-busy-emacs-keeps-a-firehose-into-a-buffer-bounded ()
  "Output into a buffer, through a memfd, waits within the backlog."
  (fastrevert-process-memory-test--run 'buffer))

(ert-deftest fastrevert-process-memory-a-busy-emacs-keeps-a-firehose-to-a-filter-bounded ()
  "Output to a filter waits within the backlog."
  (fastrevert-process-memory-test--run 'filter))

(ert-deftest fastrevert-process-memory-a-busy-emacs-keeps-framed-lines-bounded ()
  "Output framed into lines waits within the backlog."
  (fastrevert-process-memory-test--run 'lines))

(ert-deftest fastrevert-process-memory-a-backlog-asked-for-bounds-what-waits ()
  "A process given its own :backlog waits within it, not the default."
  (let* ((process (fastrevert-make-process
                   :name "small backlog" :noquery t :filter #'ignore :backlog (* 1024 1024)
                   :command '("yes")))
         (id (fastrevert--process-id process)))
    (unwind-protect
        (progn
          (fastrevert-accept-process-output process 0.2)
          (fastrevert-process-memory-test--busy 1 #'ignore)
          (let ((waiting (car (fastrevert--mod-process-backlog id))))
            (should (> waiting 0))
            (should (<= (cdr (fastrevert--mod-process-backlog id))
                        fastrevert-process-memory-test--one-read))
            (should (<= waiting (+ (* 1024 1024) fastrevert-process-memory-test--one-read)))))
      (fastrevert-delete-process process))))

(provide 'fastrevert-process-memory-test)

;;; fastrevert-process-memory-test.el ends here
