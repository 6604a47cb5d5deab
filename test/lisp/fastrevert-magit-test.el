;;; fastrevert-magit-test.el --- fastrevert-mode under Magit's auto-revert -*- lexical-binding: t; -*-

;;; Commentary:

;; Magit turns `auto-revert-mode' on in the buffers of tracked files
;; (`magit-auto-revert-mode'), and after each Git command it runs for
;; side effects it calls `auto-revert-buffers' itself, narrowed through
;; its advice to the repository's buffers.  With notifications, the
;; changes reach the buffers as they are reported; without, that call
;; reverts them before Magit's refresh goes on.  These tests drive a real
;; Magit, as Debian's elpa-magit installs it, through checkouts in a
;; temporary repository.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'fastrevert)

(defun fastrevert-magit-test--git (dir &rest args)
  "Run git with ARGS in DIR; fail with its output unless it succeeds."
  (let ((default-directory dir))
    (with-temp-buffer
      (unless (zerop (apply #'call-process "git" nil t nil args))
        (error "Git %S failed: %s" args (buffer-string))))))

(defun fastrevert-magit-test--write (file content)
  "Write CONTENT to FILE, creating its directory."
  (make-directory (file-name-directory file) t)
  (let ((coding-system-for-write 'utf-8-unix))
    (write-region content nil file nil 'silent)))

(defun fastrevert-magit-test--repository (dir files)
  "Make DIR a Git repository whose FILES differ between two branches.
Each of FILES (names relative to DIR) holds \"main NAME\" on branch
`main' and \"feature NAME\" on branch `feature'; `main' is checked out."
  (fastrevert-magit-test--git dir "init" "-q" "-b" "main")
  (dolist (name files)
    (fastrevert-magit-test--write (expand-file-name name dir) (format "main %s\n" name)))
  (fastrevert-magit-test--git dir "add" "-A")
  (fastrevert-magit-test--git dir "commit" "-q" "-m" "main")
  (fastrevert-magit-test--git dir "checkout" "-q" "-b" "feature")
  (dolist (name files)
    (fastrevert-magit-test--write (expand-file-name name dir) (format "feature %s\n" name)))
  (fastrevert-magit-test--git dir "commit" "-q" "-a" "-m" "feature")
  (fastrevert-magit-test--git dir "checkout" "-q" "main"))

(defun fastrevert-magit-test--text (buffer)
  "Return BUFFER's text without properties."
  (with-current-buffer buffer
    (buffer-substring-no-properties (point-min) (point-max))))

(defun fastrevert-magit-test--branch-shown-p (buffer branch)
  "Return non-nil if BUFFER's `vc-mode' names BRANCH."
  (let ((mode (buffer-local-value 'vc-mode buffer)))
    (and (stringp mode)
         (string-match-p (concat "[-:@]" (regexp-quote branch) "\\'")
                         (substring-no-properties mode)))))

(defun fastrevert-magit-test--matches (buffers names branch)
  "Return non-nil if each of BUFFERS, visiting NAMES, is as on BRANCH.
That is: its text is the file's on BRANCH and its `vc-mode' names
BRANCH.  On a mismatch, return nil and say which buffer in the test's
log."
  (cl-every (lambda (pair)
              (let ((buffer (car pair))
                    (expected (format "%s %s\n" branch (cdr pair))))
                (or (and (equal (fastrevert-magit-test--text buffer) expected)
                         (fastrevert-magit-test--branch-shown-p buffer branch))
                    (progn (message "%s: text %S, vc-mode %S; expected %S on %s"
                                    (buffer-name buffer) (fastrevert-magit-test--text buffer)
                                    (let ((mode (buffer-local-value 'vc-mode buffer)))
                                      (if (stringp mode) (substring-no-properties mode) mode))
                                    expected branch)
                           nil))))
            (cl-mapcar #'cons buffers names)))

(defvar fastrevert-magit-test--refreshes nil
  "What each Magit refresh found, newest first: non-nil if the buffers matched.")

(defun fastrevert-magit-test--git-idle-p ()
  "Return non-nil if no Git process that Magit started is running."
  (not (cl-some (lambda (process)
                  (and (process-live-p process)
                       (string-prefix-p "magit" (or (buffer-name (process-buffer process)) ""))))
                (process-list))))

(defun fastrevert-magit-test--checkout (function branch buffers names)
  "Check BRANCH out with the Magit command FUNCTION; return what Magit's refresh saw.
The value is non-nil if, when the refresh that follows the checkout
ran `magit-post-refresh-hook', each of BUFFERS (visiting NAMES) showed
its file as on BRANCH.  Magit 3 runs Git and refreshes before the
command returns; Magit 4 runs some commands' Git asynchronously and
refreshes from the process's sentinel."
  (let ((record (lambda ()
                  (push (fastrevert-magit-test--matches buffers names branch)
                        fastrevert-magit-test--refreshes))))
    (setq fastrevert-magit-test--refreshes nil)
    (add-hook 'magit-post-refresh-hook record t)
    (unwind-protect
        (progn
          (funcall function branch)
          (should (fastrevert-test-wait-for
                   (lambda () (and fastrevert-magit-test--refreshes
                                   (fastrevert-magit-test--git-idle-p)))
                   30))
          (car fastrevert-magit-test--refreshes))
      (remove-hook 'magit-post-refresh-hook record))))

(defun fastrevert-magit-test--run (use-notify test)
  "Call TEST in a repository whose visited files Magit auto-reverts.
TEST gets the buffers and the names of their files (see
`fastrevert-magit-test--repository'); `main' is checked out.  Magit
and `fastrevert-mode' run with `auto-revert-use-notify' set to
USE-NOTIFY."
  (fastrevert-test-require-debian-package 'magit)
  (fastrevert-test-with-temp-dir repo
    (let* ((process-environment
            (append '("GIT_CONFIG_NOSYSTEM=1" "GIT_CONFIG_GLOBAL=/dev/null"
                      "GIT_AUTHOR_NAME=fastrevert" "GIT_AUTHOR_EMAIL=fastrevert@example.invalid"
                      "GIT_COMMITTER_NAME=fastrevert"
                      "GIT_COMMITTER_EMAIL=fastrevert@example.invalid")
                    process-environment))
           (names '("a.txt" "b.txt" "sub/c.txt"))
           (auto-revert-verbose nil)
           (auto-revert-use-notify use-notify)
           ;; Without notifications the engine polls: not before Magit's
           ;; refresh, which must then find the buffers reverted itself.
           (auto-revert-interval 60)
           (default-directory repo)
           (buffers nil))
      (fastrevert-magit-test--repository repo names)
      (unwind-protect
          (progn
            (fastrevert-mode 1)
            (magit-auto-revert-mode 1)
            (setq buffers (mapcar (lambda (name) (find-file-noselect (expand-file-name name repo)))
                                  names))
            ;; Magit has put each tracked file's buffer under auto-revert,
            ;; and the engine watches it.
            (dolist (buffer buffers)
              (should (buffer-local-value 'auto-revert-mode buffer))
              (should (memq buffer auto-revert-buffer-list))
              (should (fastrevert--descriptor-p
                       (buffer-local-value 'auto-revert-notify-watch-descriptor buffer))))
            ;; And has taken its first look at each file, before any
            ;; checkout: a first look in the middle of one is another
            ;; story, which the VC tests tell.
            (should (fastrevert-test-wait-for
                     (lambda () (and (cl-every #'fastrevert--watching-p buffers)
                                     (fastrevert-magit-test--settled-p)))))
            (should (fastrevert-magit-test--matches buffers names "main"))
            (funcall test buffers names))
        (fastrevert-test-wait-for #'fastrevert-magit-test--git-idle-p 30)
        (magit-auto-revert-mode -1)
        (fastrevert-mode -1)
        (let ((kill-buffer-query-functions nil))
          (dolist (buffer buffers) (kill-buffer buffer))
          (dolist (buffer (buffer-list))
            (when (string-prefix-p "magit" (buffer-name buffer))
              (kill-buffer buffer))))))))

(defun fastrevert-magit-test--settled-p ()
  "Return non-nil if fastrevert has no check or VC refresh waiting."
  (and (not fastrevert--revert-timer)
       (zerop (hash-table-count fastrevert--pending))
       (zerop (hash-table-count fastrevert--vc-pending))))

(ert-deftest fastrevert-magit-checkout-leaves-every-buffer-on-the-new-branch ()
  "After a Magit checkout, each visited file's buffer shows it on the new branch."
  (fastrevert-magit-test--run
   t
   (lambda (buffers names)
     (dolist (step '((magit-checkout . "feature") (magit-branch-checkout . "main")))
       (funcall (car step) (cdr step))
       (should (fastrevert-test-wait-for
                (lambda () (and (fastrevert-magit-test--git-idle-p)
                                (fastrevert-magit-test--settled-p)
                                (fastrevert-magit-test--matches buffers names (cdr step))))
                30))))))

(ert-deftest fastrevert-magit-refresh-reverts-polled-buffers-itself ()
  "Without notifications, Magit's refresh after a checkout finds every buffer reverted.
That refresh calls `auto-revert-buffers', which checks each polled
buffer before it returns, as stock's does."
  (fastrevert-magit-test--run
   nil
   (lambda (buffers names)
     (should (fastrevert-magit-test--checkout #'magit-checkout "feature" buffers names))
     (should (fastrevert-magit-test--checkout #'magit-branch-checkout "main" buffers names))
     ;; Nothing the engine polls afterwards undoes any of it.
     (should (fastrevert-test-wait-for #'fastrevert-magit-test--settled-p))
     (should (fastrevert-magit-test--matches buffers names "main")))))

(provide 'fastrevert-magit-test)

;;; fastrevert-magit-test.el ends here
