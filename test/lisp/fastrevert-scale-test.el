;;; fastrevert-scale-test.el --- Tests of the batch path at scale -*- lexical-binding: t; -*-

;;; Commentary:

;; A batch keeps each buffer it handles off two costs that grow with the
;; number of buffers: a `let' of `case-fold-search' that walks every
;; buffer, and frequent garbage collections.  These tests check that it
;; does, and that nothing of it outlives the batch.

;;; Code:

(require 'cl-lib)
(require 'fastrevert-test-helpers)
(require 'fastrevert)
(require 'autorevert)

(defmacro fastrevert-scale-test--with-mode (&rest body)
  "Run BODY with `fastrevert-mode' on; kill the file buffers afterwards."
  (declare (indent 0))
  `(let ((auto-revert-verbose nil)
         (auto-revert-use-notify t)
         (auto-revert-avoid-polling t)
         (fastrevert-settle-delay 0.02))
     (unwind-protect
         (progn (fastrevert-mode 1) ,@body)
       (fastrevert-mode -1)
       (dolist (buffer (buffer-list))
         (when (buffer-file-name buffer)
           (with-current-buffer buffer (set-buffer-modified-p nil))
           (kill-buffer buffer))))))

(defun fastrevert-scale-test--visit (file)
  "Write FILE, visit it under `auto-revert-mode' and return its buffer."
  (with-temp-file file (insert "old\n"))
  (let ((buffer (find-file-noselect file)))
    (with-current-buffer buffer (auto-revert-mode 1))
    (should (fastrevert-test-wait-for
             (lambda () (fastrevert--watching-p buffer))))
    (should (fastrevert-test-wait-for
             (lambda () (and (not fastrevert--revert-timer)
                             (zerop (hash-table-count fastrevert--pending))))))
    buffer))

(defun fastrevert-scale-test--rewrite (file)
  "Rewrite FILE from another program."
  (unless (zerop (call-process "sh" nil nil nil "-c" "printf 'new\\n' > \"$1\"" "sh" file))
    (error "Could not rewrite %s" file)))

(ert-deftest fastrevert-scale-revert-binds-case-fold-search-locally-and-leaves-no-trace ()
  "While a batch reverts a buffer, `case-fold-search' is local to it, then not."
  (fastrevert-test-with-temp-dir dir
    (fastrevert-scale-test--with-mode
      (let* ((file (expand-file-name "a.txt" dir))
             (buffer (fastrevert-scale-test--visit file))
             (seen nil))
        (with-current-buffer buffer
          (should-not (local-variable-p 'case-fold-search))
          (add-hook 'after-revert-hook
                    (lambda ()
                      (push (list (local-variable-p 'case-fold-search) case-fold-search
                                  gc-cons-threshold)
                            seen))
                    nil t))
        (fastrevert-scale-test--rewrite file)
        (should (fastrevert-test-wait-for (lambda () seen)))
        (pcase-let ((`(,local ,value ,threshold) (car seen)))
          (should local)
          (should (eq value (default-value 'case-fold-search)))
          (should (>= threshold fastrevert--batch-gc-threshold)))
        (should (fastrevert-test-wait-for (lambda () (not fastrevert--revert-timer))))
        (should-not (local-variable-p 'case-fold-search buffer))
        (should (< gc-cons-threshold fastrevert--batch-gc-threshold))))))

;; Emacs makes the buffer in which a revert finds the file's coding at
;; its first revert and keeps it.  Made then, inside a batch, it had no
;; local `case-fold-search': the first batch of a session walked every
;; buffer once per revert, and 10,000 reverts took 30 s instead of 6.
(ert-deftest fastrevert-scale-first-batch-of-a-session-finds-codings-with-a-local-case-fold ()
  "A batch run before any revert finds codings with a local `case-fold-search'.
It is local where `set-auto-coding' runs, also when the batch starts
with no coding work buffer: the batch makes it, as Emacs would at the
first revert, and it stays afterwards without the local value."
  (fastrevert-test-with-temp-dir dir
    (fastrevert-scale-test--with-mode
      (let* ((files (mapcar (lambda (name) (expand-file-name name dir)) '("e.txt" "f.txt")))
             (buffers (mapcar #'fastrevert-scale-test--visit files))
             (seen nil)
             (record (lambda (&rest _)
                       (push (cons (buffer-name) (local-variable-p 'case-fold-search)) seen))))
        (dolist (name fastrevert--coding-work-buffers)
          (when (get-buffer name) (kill-buffer name)))
        (advice-add 'set-auto-coding :before record)
        (unwind-protect
            (progn
              (mapc #'fastrevert-scale-test--rewrite files)
              (should (fastrevert-test-wait-for
                       (lambda ()
                         (cl-every (lambda (buffer)
                                     (equal (with-current-buffer buffer (buffer-string))
                                            "new\n"))
                                   buffers)))))
          (advice-remove 'set-auto-coding record))
        (should (>= (length seen) 2))
        (should (equal (delete-dups (mapcar #'cdr seen)) '(t)))
        (let ((work (get-buffer (car (car seen)))))
          (should (buffer-live-p work))
          (should (fastrevert-test-wait-for (lambda () (not fastrevert--revert-timer))))
          (should-not (local-variable-p 'case-fold-search work)))))))

(ert-deftest fastrevert-scale-batch-collects-no-garbage-between-reverts-and-vc-refreshes ()
  "A batch's reverts and its VC refreshes run under one raised GC threshold.
Garbage the reverts make is not collected before the refreshes start:
a collection between the two halves would only delay the refreshes."
  (fastrevert-test-with-temp-dir dir
    (fastrevert-scale-test--with-mode
      (let* ((file (expand-file-name "c.txt" dir))
             (buffer (fastrevert-scale-test--visit file))
             (after-revert nil)
             (at-refresh nil)
             (record (lambda (_buffer) (setq at-refresh gcs-done))))
        (with-current-buffer buffer
          (add-hook 'after-revert-hook
                    (lambda ()
                      ;; 16 MB: past the default threshold and a tenth of
                      ;; this heap, well under a batch's threshold.
                      (make-vector (* 2 1024 1024) nil)
                      (setq after-revert gcs-done))
                    nil t))
        (advice-add 'fastrevert--refresh-vc-of :before record)
        (unwind-protect
            (progn
              (fastrevert-scale-test--rewrite file)
              (should (fastrevert-test-wait-for (lambda () at-refresh))))
          (advice-remove 'fastrevert--refresh-vc-of record))
        (should after-revert)
        (should (= at-refresh after-revert))))))

(ert-deftest fastrevert-scale-auto-revert-buffers-call-and-its-filter-collect-no-garbage ()
  "A call of `auto-revert-buffers' runs under a batch's GC threshold.
Magit calls it after each Git command, narrowing its buffers with a
filter that runs on every one of them: that filter, and the checks,
must not collect garbage on the way, as a batch does not."
  (fastrevert-test-with-temp-dir dir
    (let* ((seen nil)
           ;; Innermost, where Magit's filter sits.
           (filter (lambda (function)
                     (let ((before gcs-done))
                       ;; 16 MB: past the default threshold, well under a batch's.
                       (make-vector (* 2 1024 1024) nil)
                       (prog1 (funcall function)
                         (setq seen (list gc-cons-threshold before gcs-done)))))))
      (advice-add 'auto-revert-buffers :around filter '((depth . 100)))
      (unwind-protect
          (fastrevert-scale-test--with-mode
            (fastrevert-scale-test--visit (expand-file-name "d.txt" dir))
            (auto-revert-buffers)
            (should seen)
            (pcase-let ((`(,threshold ,before ,after) seen))
              (should (>= threshold fastrevert--batch-gc-threshold))
              (should (= before after)))
            (should (< gc-cons-threshold fastrevert--batch-gc-threshold)))
        (advice-remove 'auto-revert-buffers filter)))))

(ert-deftest fastrevert-scale-revert-keeps-a-case-fold-search-a-hook-sets ()
  "A value a revert hook gives `case-fold-search' stays, as in stock Emacs."
  (fastrevert-test-with-temp-dir dir
    (fastrevert-scale-test--with-mode
      (let* ((file (expand-file-name "b.txt" dir))
             (buffer (fastrevert-scale-test--visit file))
             (reverted nil)
             (wanted (not (default-value 'case-fold-search))))
        (with-current-buffer buffer
          (add-hook 'after-revert-hook
                    (lambda () (setq case-fold-search wanted reverted t))
                    nil t))
        (fastrevert-scale-test--rewrite file)
        (should (fastrevert-test-wait-for (lambda () reverted)))
        (should (fastrevert-test-wait-for (lambda () (not fastrevert--revert-timer))))
        (should (local-variable-p 'case-fold-search buffer))
        (should (eq (buffer-local-value 'case-fold-search buffer) wanted))))))

(provide 'fastrevert-scale-test)

;;; fastrevert-scale-test.el ends here
