;;; fastrevert-vc-test.el --- Tests of the VC state of a batch -*- lexical-binding: t; -*-

;;; Commentary:

;; The VC state that `fastrevert-vc-call-with-batch' gives each buffer is
;; compared with what the stock `vc-refresh-state' of the running Emacs
;; gives it, over Git repositories in every state vc-git knows; and the
;; Git processes a batch starts are counted by a wrapper around Git.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'fastrevert)
(require 'fastrevert-vc)
(require 'vc-git)
(require 'smerge-mode)

(defconst fastrevert-vc-test--fixture
  "set -e
top=$1
detached=$2
cd \"$top\"
mkdir sub-origin
cd sub-origin
git init -q -b main
printf 'inner\\n' > inner.txt
git add .
git commit -qm inner
cd ..
mkdir fresh
cd fresh
git init -q -b trunk
printf 'a\\n' > staged.txt
git add staged.txt
printf 'u\\n' > loose.txt
cd ..
mkdir repo
cd repo
git init -q -b main
mkdir dir 'with space' ign 'glob[1]?*'
for f in up.txt edited.txt removed.txt unindexed.txt gone.txt dir/deep.txt \\
         'with space/a b.txt' 'glob[1]?*/x[y]*.txt'; do printf '1\\n' > \"$f\"; done
printf '2\\n' >> 'glob[1]?*/x[y]*.txt'
printf 'base\\n' > conflict.txt
printf 'ign/\\n*.log\\n' > .gitignore
git add .
git commit -qm base
git -c protocol.file.allow=always submodule -q add ../sub-origin sub
git commit -qm sub
git checkout -qb other
printf 'other\\n' > conflict.txt
git commit -qam other
git checkout -q main
printf 'main\\n' > conflict.txt
git commit -qam main
if [ \"$detached\" = yes ]; then git checkout -q --detach; fi
git merge -q other >/dev/null 2>&1 || true
printf '2\\n' >> edited.txt
git rm -q removed.txt
git rm -q --cached unindexed.txt
rm gone.txt
printf 'n\\n' > added.txt
git add added.txt
printf 'u\\n' > untracked.txt
printf 'i\\n' > ign/ignored.txt
printf 'l\\n' > x.log
printf 'e\\n' >> sub/inner.txt
"
  "Shell script that makes the repositories of the differential test.
Arguments: the directory to make them in, and `yes' for a detached HEAD.")

(defconst fastrevert-vc-test--visited
  '("repo/up.txt" "repo/edited.txt" "repo/removed.txt" "repo/unindexed.txt"
    "repo/conflict.txt" "repo/gone.txt" "repo/dir/deep.txt" "repo/with space/a b.txt"
    "repo/glob[1]?*/x[y]*.txt"
    "repo/added.txt" "repo/untracked.txt" "repo/ign/ignored.txt" "repo/x.log"
    "repo/sub/inner.txt" "fresh/staged.txt" "fresh/loose.txt")
  "The files the differential test visits, relative to its directory.")

(defun fastrevert-vc-test--environment (dir)
  "Return `process-environment' for Git commands run by the tests in DIR.
Commits get a fixed author, and no configuration of the user's is read."
  (append (list (concat "HOME=" dir) "GIT_CONFIG_NOSYSTEM=1"
                "GIT_AUTHOR_NAME=fastrevert" "GIT_AUTHOR_EMAIL=fastrevert@example.org"
                "GIT_COMMITTER_NAME=fastrevert" "GIT_COMMITTER_EMAIL=fastrevert@example.org")
          process-environment))

(defun fastrevert-vc-test--sh (dir script &rest args)
  "Run the shell SCRIPT in DIR with ARGS as $1...; fail unless it succeeds."
  (let ((default-directory dir))
    (with-temp-buffer
      (unless (zerop (apply #'call-process "sh" nil t nil "-c" script "sh" args))
        (error "Shell script failed: %s" (buffer-string))))))

(defun fastrevert-vc-test--sh-while-running (dir script)
  "Run the shell SCRIPT in DIR while Emacs handles events, as a user's Emacs would.
Fail unless it succeeds within a minute."
  (let* ((default-directory dir)
         (process (make-process :name "fastrevert-vc-test" :command (list "sh" "-c" script)
                                :buffer nil :noquery t)))
    (should (fastrevert-test-wait-for (lambda () (not (process-live-p process))) 60))
    (should (eq (process-exit-status process) 0))))

(defmacro fastrevert-vc-test--with-git-log (log &rest body)
  "Run BODY with every Git process recorded, one line of arguments each, in LOG.
LOG is a variable bound to the log file's name; `vc-git-program' is a
wrapper that appends to it and runs Git."
  (declare (indent 1))
  (let ((wrapper (make-symbol "wrapper")))
    `(let* ((,wrapper (make-temp-file "fastrevert-git-" nil ".sh"
                                      (format (concat "#!/bin/sh\nprintf '%%s\\n' \"$*\" >> %s\n"
                                                      "exec %s \"$@\"\n")
                                              (shell-quote-argument ,log)
                                              (shell-quote-argument (executable-find "git")))))
            (vc-git-program ,wrapper))
       (unwind-protect
           (progn (set-file-modes ,wrapper #o700) ,@body)
         (delete-file ,wrapper)))))

(defun fastrevert-vc-test--log-lines (log)
  "Return the lines of the Git LOG, or nil if there is none."
  (and (file-exists-p log)
       (with-temp-buffer
         (insert-file-contents log)
         (split-string (buffer-string) "\n" t))))

(defun fastrevert-vc-test--reset (buffer)
  "Forget every piece of VC state of BUFFER and of its file."
  (with-current-buffer buffer
    (vc-file-clearprops buffer-file-name)
    (setq vc-mode "stale")
    (when smerge-mode (smerge-mode -1))
    (kill-local-variable 'backup-inhibited)
    (kill-local-variable 'vc-mode-line-hook)
    (setq buffer-read-only nil)))

(defun fastrevert-vc-test--state (buffer)
  "Return everything `vc-refresh-state' decides for BUFFER."
  (with-current-buffer buffer
    ;; The text of the mode line and its properties (which Emacs 28's
    ;; `equal-including-properties' compares with `eq').
    (list :vc-mode (and vc-mode (cons (substring-no-properties vc-mode)
                                      (object-intervals vc-mode)))
          :properties (symbol-plist (intern-soft (expand-file-name buffer-file-name)
                                                 vc-file-prop-obarray))
          :smerge smerge-mode
          :read-only buffer-read-only
          :backup-inhibited backup-inhibited
          :hook (and (local-variable-p 'vc-mode-line-hook) vc-mode-line-hook)
          :error fastrevert-vc-test--error)))

(defvar-local fastrevert-vc-test--error nil
  "The error the last refresh of this buffer signaled, or nil.")

(defun fastrevert-vc-test--refresh (buffer)
  "Refresh BUFFER's VC state as the stock auto-revert handler does.
An error is recorded: as root, stock `vc-mode-line' fails on a file
that is registered but missing."
  (with-current-buffer buffer
    (setq fastrevert-vc-test--error nil)
    (condition-case err
        (let ((revert-buffer-in-progress-p t))
          (vc-refresh-state))
      (error (setq fastrevert-vc-test--error err)))))

(defvar vc-use-short-revision)

(defun fastrevert-vc-test--compare (detached &optional short)
  "Compare stock and batch VC states over the fixture; DETACHED as its HEAD.
SHORT non-nil sets `vc-use-short-revision' (Emacs 30 and later), which
has vc-git ask Git for a short revision: one more process per
repository."
  (fastrevert-test-with-temp-dir dir
    (let* ((process-environment (fastrevert-vc-test--environment dir))
           (vc-use-short-revision short)
           (log (expand-file-name "git.log" dir))
           (vc-handled-backends vc-handled-backends))
      (fastrevert-vc-test--sh dir fastrevert-vc-test--fixture dir (if detached "yes" "no"))
      (let ((buffers (let ((vc-handled-backends nil))
                       (mapcar (lambda (name) (find-file-noselect (expand-file-name name dir)))
                               fastrevert-vc-test--visited))))
        (unwind-protect
            (fastrevert-vc-test--with-git-log log
              (let ((stock (mapcar (lambda (buffer)
                                     (fastrevert-vc-test--reset buffer)
                                     (fastrevert-vc-test--refresh buffer)
                                     (fastrevert-vc-test--state buffer))
                                   buffers)))
                ;; The fixture covers every state a refresh gives (an
                ;; ignored file, like one outside VC, is not registered).
                (should (equal (sort (delete-dups
                                      (mapcar (lambda (state)
                                                (symbol-name
                                                 (plist-get (plist-get state :properties)
                                                            'vc-state)))
                                              stock))
                                     #'string<)
                               '("added" "conflict" "edited" "nil" "removed"
                                 "unregistered" "up-to-date")))
                (should (plist-get (nth 4 stock) :smerge))
                (when (file-exists-p log) (delete-file log))
                (mapc #'fastrevert-vc-test--reset buffers)
                (fastrevert-vc-call-with-batch
                 buffers (lambda () (mapc #'fastrevert-vc-test--refresh buffers)))
                (cl-loop for buffer in buffers
                         for expected in stock
                         do (ert-info ((format "%s" (buffer-file-name buffer)))
                              (should (equal (fastrevert-vc-test--state buffer) expected))))
                ;; Three repositories (the work tree, its submodule, one
                ;; without commits), two or three Git processes each, and
                ;; nothing started for any one buffer.
                (let ((commands (fastrevert-vc-test--log-lines log)))
                  (should (= (length commands) (if short 9 6)))
                  (should (cl-every (lambda (command)
                                      (string-match-p
                                       (concat "\\`--no-pager \\(status --porcelain=v2 \\|"
                                               "ls-files -c -z -- :(glob)\\|"
                                               "rev-parse --short HEAD\\'\\)")
                                       command))
                                    commands)))))
          (dolist (buffer buffers)
            (with-current-buffer buffer (set-buffer-modified-p nil))
            (kill-buffer buffer)))))))

(ert-deftest fastrevert-vc-batch-gives-every-buffer-the-stock-vc-state-on-a-branch ()
  (fastrevert-vc-test--compare nil))

(ert-deftest fastrevert-vc-batch-gives-every-buffer-the-stock-vc-state-at-a-detached-head ()
  (fastrevert-vc-test--compare t))

(ert-deftest fastrevert-vc-batch-asks-for-a-short-revision-once-per-repository ()
  (skip-unless (boundp 'vc-use-short-revision))
  (fastrevert-vc-test--compare nil t))

;;;; Through fastrevert-mode

(defmacro fastrevert-vc-test--with-mode (dir &rest body)
  "Run BODY in DIR under `fastrevert-mode' and Global Auto-Revert mode.
Git commands run with `fastrevert-vc-test--environment'.  Every file
buffer is killed afterwards."
  (declare (indent 1))
  `(let ((auto-revert-verbose nil)
         (auto-revert-use-notify t)
         (auto-revert-avoid-polling t)
         (auto-revert-check-vc-info nil)
         (auto-revert-stop-on-user-input nil)
         (fastrevert-settle-delay 0.03)
         (process-environment (fastrevert-vc-test--environment ,dir))
         (default-directory ,dir))
     (unwind-protect
         (progn
           (fastrevert-mode 1)
           (global-auto-revert-mode 1)
           ,@body)
       (global-auto-revert-mode -1)
       (fastrevert-mode -1)
       (dolist (buffer (buffer-list))
         (with-current-buffer buffer
           (when buffer-file-name
             (set-buffer-modified-p nil)
             (kill-buffer buffer)))))))

(defun fastrevert-vc-test--visit (files)
  "Visit FILES and return their buffers once fastrevert has settled."
  (let ((buffers (mapcar #'find-file-noselect files)))
    (should (fastrevert-test-wait-for
             (lambda () (and (cl-every (lambda (buffer)
                                         (fastrevert--watching-p buffer))
                                       buffers)
                             (fastrevert-vc-test--settled-p)))))
    buffers))

(defun fastrevert-vc-test--settled-p ()
  "Return non-nil if fastrevert has nothing left to revert or refresh."
  (and (not fastrevert--revert-timer)
       (zerop (hash-table-count fastrevert--pending))
       (zerop (hash-table-count fastrevert--vc-pending))))

(defun fastrevert-vc-test--text (buffer)
  "Return BUFFER's text without properties."
  (with-current-buffer buffer (buffer-substring-no-properties (point-min) (point-max))))

(defmacro fastrevert-vc-test--counting-reverts (counts &rest body)
  "Run BODY with COUNTS, a hash table, counting the reverts of each buffer."
  (declare (indent 1))
  (let ((counter (make-symbol "counter")))
    `(let ((,counter (lambda () (puthash (current-buffer) (1+ (gethash (current-buffer) ,counts 0))
                                         ,counts))))
       (add-hook 'after-revert-hook ,counter)
       (unwind-protect (progn ,@body)
         (remove-hook 'after-revert-hook ,counter)))))

(defconst fastrevert-vc-test--branches
  "set -e
git init -q -b main
for d in a b; do
  mkdir $d
  for i in 0 1 2 3 4 5 6 7 8 9; do printf 'main %s %s\\n' $d $i > $d/f$i.txt; done
done
git add .
git commit -qm main
git checkout -qb other
for f in a/*.txt b/*.txt; do printf 'other %s\\n' $f > $f; done
git commit -qam other
git checkout -q main
"
  "Shell script that makes a repository whose two branches differ in 20 files.")

;;;; What a batch spares each file

(defun fastrevert-vc-test--visit-branches (dir)
  "Make the repository of `fastrevert-vc-test--branches' in DIR.
Return buffers visiting its 20 files, visited with VC off."
  (fastrevert-vc-test--sh dir fastrevert-vc-test--branches)
  (let ((vc-handled-backends nil))
    (mapcar #'find-file-noselect (directory-files-recursively dir "\\.txt\\'"))))

;; Every backend's `registered' check looks for its control directory
;; above the file, one `vc-find-root' each; a batch looks once per
;; directory and gives each of its files that answer.
(ert-deftest fastrevert-vc-batch-finds-roots-once-per-directory-with-the-stock-answer ()
  (fastrevert-test-with-temp-dir dir
    (let ((process-environment (fastrevert-vc-test--environment dir)))
      (let* ((buffers (fastrevert-vc-test--visit-branches dir))
             (witnesses '(".git" ".svn" "a"))
             (find-all (lambda ()
                         (mapcar (lambda (buffer)
                                   (mapcar (lambda (witness)
                                             (vc-find-root (buffer-file-name buffer) witness))
                                           witnesses))
                                 buffers)))
             (stock (funcall find-all))
             (walks nil)
             (count (lambda (&rest _) (when walks (cl-incf (car walks))))))
        (unwind-protect
            (progn
              ;; The names are found, or not, as the fixture says.
              (should (cl-every (lambda (found)
                                  (and (nth 0 found) (null (nth 1 found)) (nth 2 found)))
                                stock))
              (advice-add 'locate-dominating-file :before count '((name . count-walks)))
              (should (equal (fastrevert-vc-call-with-batch
                              buffers (lambda () (setq walks (list 0)) (funcall find-all)))
                             stock))
              ;; Two directories, three names.
              (should (equal walks '(6))))
          (advice-remove 'locate-dominating-file 'count-walks)
          (mapc #'kill-buffer buffers))))))

;; RCS, CVS, SCCS and SRC come before Git in `vc-handled-backends'.
;; RCS, SCCS and SRC register a file whose master file exists beside
;; it, CVS one its CVS/Entries lists.  A batch looks the masters and
;; the CVS directory up in one listing of each directory.
(ert-deftest fastrevert-vc-batch-finds-rcs-cvs-sccs-and-src-files-as-stock-does ()
  (fastrevert-test-with-temp-dir dir
    (let ((process-environment (cons "PROJECTDIR" (fastrevert-vc-test--environment dir)))
          (masters "/\\(RCS/\\|SCCS/\\|\\.src/\\|s\\.\\|CVS/Entries\\'\\)\\|,v\\'")
          (looked nil))
      (fastrevert-vc-test--sh
       dir (concat "set -e\ngit init -q -b main\nmkdir plain RCS SCCS .src cvs\n"
                   "for f in plain/p.txt r.txt v.txt s.txt c.txt cvs/k.txt; do"
                   " printf '1\\n' > $f; done\n"
                   "git add .\ngit commit -qm base\n"
                   ": > RCS/r.txt,v\n: > v.txt,v\n: > SCCS/s.s.txt\n: > .src/c.txt,v\n"
                   "mkdir cvs/CVS\necho '/k.txt/1.1/Mon Jan  1 00:00:00 2024//' > cvs/CVS/Entries\n"))
      (let* ((buffers (let ((vc-handled-backends nil))
                        (mapcar (lambda (name) (find-file-noselect (expand-file-name name dir)))
                                '("r.txt" "v.txt" "s.txt" "c.txt" "cvs/k.txt"
                                  "plain/p.txt"))))
             (plain (last buffers))
             (count (lambda (file)
                      (when (and looked (string-match-p masters file)) (cl-incf (car looked))))))
        (unwind-protect
            (let ((stock (mapcar (lambda (buffer)
                                   (fastrevert-vc-test--reset buffer)
                                   (fastrevert-vc-test--refresh buffer)
                                   (fastrevert-vc-test--state buffer))
                                 buffers)))
              (should (equal (mapcar (lambda (buffer) (vc-backend (buffer-file-name buffer)))
                                     buffers)
                             '(RCS RCS SCCS SRC CVS Git)))
              (mapc #'fastrevert-vc-test--reset buffers)
              (fastrevert-vc-call-with-batch
               buffers (lambda () (mapc #'fastrevert-vc-test--refresh buffers)))
              (should (equal (mapcar #'fastrevert-vc-test--state buffers) stock))
              ;; Stock looks for six masters and a CVS/Entries for the
              ;; file that has none; the batch's listings tell it so.
              (advice-add 'file-exists-p :before count '((name . count-masters)))
              (advice-add 'file-readable-p :before count '((name . count-masters)))
              (setq looked (list 0))
              (fastrevert-vc-test--reset (car plain))
              (fastrevert-vc-test--refresh (car plain))
              (should (equal looked '(7)))
              (setq looked (list 0))
              (fastrevert-vc-test--reset (car plain))
              (fastrevert-vc-call-with-batch
               plain (lambda () (fastrevert-vc-test--refresh (car plain))))
              (should (equal looked '(0)))
              (should (equal (fastrevert-vc-test--state (car plain)) (car (last stock)))))
          (advice-remove 'file-exists-p 'count-masters)
          (advice-remove 'file-readable-p 'count-masters)
          (dolist (buffer buffers)
            (with-current-buffer buffer (set-buffer-modified-p nil))
            (kill-buffer buffer)))))))

(ert-deftest fastrevert-vc-batch-compares-versions-once-as-version-reading-says ()
  "Within a batch `version<=' runs once per pair of versions.
vc-git compares Git's version with a constant for every file.  A
batch remembers the answer, but only while versions are read as
when it started."
  (let ((parsed 0))
    (let ((count (lambda (&rest _) (cl-incf parsed))))
      (advice-add 'version-to-list :before count '((name . count-parses)))
      (unwind-protect
          (fastrevert-test-with-temp-dir dir
            (let* ((process-environment (fastrevert-vc-test--environment dir))
                   (buffers (fastrevert-vc-test--visit-branches dir))
                   (answers nil))
              (unwind-protect
                  (fastrevert-vc-call-with-batch
                   buffers
                   (lambda ()
                     (setq parsed 0)
                     (dotimes (_ 10) (push (version<= "1.0alpha" "1.0") answers))
                     (should (= parsed 2))
                     ;; Read otherwise, the same versions compare otherwise.
                     (let ((version-regexp-alist '(("^[-._+ ]?alpha$" . 5))))
                       (push (version<= "1.0alpha" "1.0") answers))
                     (should (= parsed 4))))
                (mapc #'kill-buffer buffers))
              (should (equal answers (cons nil (make-list 10 t))))))
        (advice-remove 'version-to-list 'count-parses)))))

(ert-deftest fastrevert-vc-batch-outside-git-does-not-load-vc-git-as-stock-does-not ()
  "A batch of files in no Git work tree leaves vc-git unloaded, as stock does.
Stock's `vc-refresh-state' loads vc-git only for a file below a
`.git'; a batch that loaded it anyway would cost every user outside
Git its code and data."
  (fastrevert-test-with-temp-dir dir
    (should-not (locate-dominating-file dir ".git"))
    (let ((result
           (fastrevert-test-batch-emacs
            (list fastrevert-test-lisp-directory)
            `(let* ((file (expand-file-name "plain.txt" ,dir))
                    (buffer (progn (write-region "text\n" nil file)
                                   (require 'fastrevert)
                                   (find-file-noselect file)))
                    (stock (featurep 'vc-git))
                    (batch (fastrevert-vc-call-with-batch
                            (list buffer)
                            (lambda ()
                              (with-current-buffer buffer (vc-refresh-state))
                              (featurep 'vc-git)))))
               (prin1 (list :stock stock :batch batch :backend
                            (with-current-buffer buffer (vc-backend buffer-file-name))))))))
      ;; The last line is the child's answer; messages may come before it.
      (should (equal (cons (car result) (car (last (split-string (cdr result) "\n" t))))
                     (cons 0 (prin1-to-string '(:stock nil :batch nil :backend nil))))))))

(ert-deftest fastrevert-vc-batch-refresh-makes-no-buffer-per-file ()
  "A batch refresh makes a few buffers per repository, none per file.
vc-git writes each Git command's output into a new buffer, and with
thousands of live buffers making one costs more than the rest of the
refresh; the batch answers those commands without one."
  (fastrevert-test-with-temp-dir dir
    (let ((process-environment (fastrevert-vc-test--environment dir)))
      (let* ((buffers (fastrevert-vc-test--visit-branches dir))
             (counting nil)
             (made 0)
             (count (lambda (&rest _) (when counting (cl-incf made)))))
        (unwind-protect
            (progn
              (advice-add 'generate-new-buffer :before count '((name . count-buffers)))
              (fastrevert-vc-call-with-batch
               buffers (lambda ()
                         (setq counting t)
                         (mapc #'fastrevert-vc-test--refresh buffers)
                         (setq counting nil)))
              (should (equal (mapcar (lambda (buffer) (fastrevert-vc-test--state buffer)) buffers)
                             (mapcar (lambda (buffer)
                                       (fastrevert-vc-test--reset buffer)
                                       (fastrevert-vc-test--refresh buffer)
                                       (fastrevert-vc-test--state buffer))
                                     buffers)))
              ;; Git's two runs for the batch, one `rev-parse' of HEAD,
              ;; and the first time in a session, Git's version.
              (should (= (length buffers) 20))
              (should (<= made 4)))
          (advice-remove 'generate-new-buffer 'count-buffers)
          (mapc #'kill-buffer buffers))))))

;; A batch keeps what it found of each buffer's file for the next one:
;; the expanded name, and the place in its repository.  What it keeps
;; must give way when the buffer visits another file, or when the
;; directory comes to belong to another repository.
(ert-deftest fastrevert-vc-batch-follows-a-buffer-to-another-file-and-repository ()
  (fastrevert-test-with-temp-dir dir
    (let ((process-environment (fastrevert-vc-test--environment dir))
          (log (expand-file-name "git.log" dir)))
      (fastrevert-vc-test--sh
       dir (concat "set -e\ngit init -q -b main\nmkdir sub\n"
                   "printf '1\\n' > sub/a.txt\nprintf '1\\n' > sub/b.txt\n"
                   "git add .\ngit commit -qm base\nprintf '2\\n' >> sub/b.txt\n"))
      (let* ((buffer (let ((vc-handled-backends nil))
                       (find-file-noselect (expand-file-name "sub/a.txt" dir))))
             (check (lambda (state)
                      (fastrevert-vc-test--reset buffer)
                      (when (file-exists-p log) (delete-file log))
                      (fastrevert-vc-test--with-git-log log
                        (fastrevert-vc-call-with-batch
                         (list buffer) (lambda () (fastrevert-vc-test--refresh buffer))))
                      ;; Answered from the batch's two Git processes: a
                      ;; stale name or place would leave the buffer to
                      ;; the stock refresh, which starts more.
                      (should (equal (mapcar (lambda (command)
                                               (car (split-string command " :")))
                                             (fastrevert-vc-test--log-lines log))
                                     (list (concat "--no-pager status --porcelain=v2 -z --branch"
                                                   " --untracked-files=all --ignored"
                                                   " --no-renames --")
                                           "--no-pager ls-files -c -z --")))
                      (let ((batch (fastrevert-vc-test--state buffer)))
                        (fastrevert-vc-test--reset buffer)
                        (fastrevert-vc-test--refresh buffer)
                        (should (equal batch (fastrevert-vc-test--state buffer)))
                        (should (eq (vc-state (buffer-file-name buffer)) state))))))
        (unwind-protect
            (progn
              (funcall check 'up-to-date)
              (with-current-buffer buffer
                (let ((vc-handled-backends nil))
                  (set-visited-file-name (expand-file-name "sub/b.txt" dir) t))
                (revert-buffer t t t))
              (funcall check 'edited)
              ;; sub/ becomes a repository of its own, in which b.txt is
              ;; committed as it is now: up to date there.
              (fastrevert-vc-test--sh
               (expand-file-name "sub" dir)
               "set -e\ngit init -q -b main\ngit add b.txt\ngit commit -qm inner\n")
              (funcall check 'up-to-date))
          (with-current-buffer buffer (set-buffer-modified-p nil))
          (kill-buffer buffer))))))

(ert-deftest fastrevert-vc-batch-advice-lets-every-call-outside-a-batch-through ()
  "The advice a batch puts on stays on, and outside a batch changes nothing.
Inside a batch with no file of Git's, it answers nothing either, and
`fastrevert-vc-unadvise' takes it off."
  (fastrevert-test-with-temp-dir dir
    (let ((process-environment (fastrevert-vc-test--environment dir))
          (plain (expand-file-name "plain/p.txt" dir)))
      (make-directory (file-name-directory plain))
      (write-region "p\n" nil plain)
      (let* ((buffers (fastrevert-vc-test--visit-branches dir))
             (file (buffer-file-name (car buffers)))
             (outside (find-file-noselect plain))
             (calls (lambda ()
                      (list (with-temp-buffer
                              (list (process-file "sh" nil '(t nil) nil "-c" "echo out")
                                    (buffer-string)))
                            (vc-git--run-command-string file "ls-files" "-c" "-z" "--")
                            (vc-git-registered file)
                            (vc-find-root file ".git")
                            (version<= "1.0alpha" "1.0"))))
             (stock (progn (fastrevert-vc-unadvise) (funcall calls))))
        (unwind-protect
            (progn
              (should (equal (car stock) '(0 "out\n")))
              (fastrevert-vc-call-with-batch buffers #'ignore)
              (should (advice-member-p #'fastrevert-vc--process-file-advice 'process-file))
              (should (equal (funcall calls) stock))
              (should (equal (fastrevert-vc-call-with-batch (list outside) calls) stock))
              (fastrevert-vc-unadvise)
              (should-not (cl-some (lambda (entry) (advice-member-p (cdr entry) (car entry)))
                                   fastrevert-vc--advice)))
          (mapc #'kill-buffer (cons outside buffers)))))))

;;;; Through fastrevert-mode, continued

(ert-deftest fastrevert-vc-checkout-reverts-each-buffer-once-with-the-stock-vc-state ()
  "An external checkout: every buffer reverted once, its VC state as stock's.
The whole batch starts at most three Git processes, none for any one buffer."
  (fastrevert-test-with-temp-dir dir
    (fastrevert-vc-test--with-mode dir
      (fastrevert-vc-test--sh dir fastrevert-vc-test--branches)
      (let* ((log (expand-file-name "git.log" dir))
             (counts (make-hash-table :test #'eq)))
        (fastrevert-vc-test--with-git-log log
          (let ((buffers (fastrevert-vc-test--visit (directory-files-recursively dir "\\.txt\\'")))
                (batches (plist-get (fastrevert-vc-stats) :vc-batches))
                (processes (plist-get (fastrevert-stats) :vc-processes)))
            (should (= (length buffers) 20))
            (delete-file log)
            (fastrevert-vc-test--counting-reverts counts
              (fastrevert-vc-test--sh-while-running dir "git checkout -q other")
              (should (fastrevert-test-wait-for
                       (lambda ()
                         (and (cl-every (lambda (buffer)
                                          (and (string-prefix-p
                                                "other " (fastrevert-vc-test--text buffer))
                                               (equal (substring-no-properties
                                                       (or (buffer-local-value 'vc-mode buffer) ""))
                                                      " Git-other")))
                                        buffers)
                              (fastrevert-vc-test--settled-p)))
                       30)))
            (should (cl-every (lambda (buffer) (eql (gethash buffer counts) 1)) buffers))
            (let ((commands (fastrevert-vc-test--log-lines log))
                  (batches (- (plist-get (fastrevert-vc-stats) :vc-batches) batches)))
              (should (>= batches 1))
              (should (<= (length commands) (* 3 batches)))
              (should (= (length commands)
                         (- (plist-get (fastrevert-stats) :vc-processes) processes)))
              (should-not (cl-some (lambda (command) (string-match-p " -- [^:]" command))
                                   commands)))
            ;; What the batch gave each buffer is what stock gives it.
            (dolist (buffer buffers)
              (let ((batch (fastrevert-vc-test--state buffer)))
                (fastrevert-vc-test--reset buffer)
                (fastrevert-vc-test--refresh buffer)
                (should (equal (fastrevert-vc-test--state buffer) batch))))))))))

(ert-deftest fastrevert-vc-direct-auto-revert-buffers-refreshes-vc-as-one-batch ()
  "A call of `auto-revert-buffers', as Magit makes, refreshes VC before it returns.
Without notification every buffer is checked by the call itself; the
VC refreshes of its reverts share one batch's Git processes."
  (fastrevert-test-with-temp-dir dir
    (fastrevert-vc-test--with-mode dir
      (setq auto-revert-use-notify nil)
      (fastrevert-vc-test--sh dir fastrevert-vc-test--branches)
      (let ((log (expand-file-name "git.log" dir)))
        (fastrevert-vc-test--with-git-log log
          (let ((buffers (fastrevert-vc-test--visit
                          (directory-files-recursively dir "\\.txt\\'"))))
            (fastrevert-vc-test--sh dir "git checkout -q other")
            (delete-file log)
            (auto-revert-buffers)
            (should (cl-every (lambda (buffer)
                                (and (string-prefix-p "other " (fastrevert-vc-test--text buffer))
                                     (equal (substring-no-properties
                                             (buffer-local-value 'vc-mode buffer))
                                            " Git-other")))
                              buffers))
            (should (<= (length (fastrevert-vc-test--log-lines log)) 3))))))))

(defconst fastrevert-vc-test--topic
  "set -e
git init -q -b main
printf '*.txt filter=slow\\n' > .gitattributes
for i in 0 1 2 3 4; do printf 'base\\n' > f$i.txt; done
git add .
git commit -qm base
git checkout -qb topic
for c in 1 2 3 4 5 6 7 8 9 10; do
  for i in 0 1 2 3 4; do printf 'commit %s\\n' $c >> f$i.txt; done
  git commit -qam \"commit $c\"
done
git checkout -q main
printf 'elsewhere\\n' > other.log
git add other.log
git commit -qm elsewhere
git checkout -q topic
"
  "Shell script for a branch of ten commits that all touch five files.
Its files go through a filter, `slow', which the rebase test defines.")

(ert-deftest fastrevert-vc-rebase-of-ten-commits-reverts-each-buffer-once ()
  "A rebase rewrites the same files ten times; each buffer is reverted once.
However long the rebase takes: on a loaded machine, with every Git
process slow to start (as under `make asan-emacs', which preloads
libasan into them), it can outlast the default hold limit."
  (fastrevert-test-with-temp-dir dir
    (let ((fastrevert-vc-hold-limit 120))
      (fastrevert-vc-test--with-mode dir
        (fastrevert-vc-test--sh dir fastrevert-vc-test--topic)
        (let ((buffers (fastrevert-vc-test--visit (directory-files dir t "\\.txt\\'")))
              (counts (make-hash-table :test #'eq))
              (final (with-temp-buffer
                       (insert "base\n")
                       (dotimes (c 10) (insert (format "commit %d\n" (1+ c))))
                       (buffer-string))))
          (should (= (length buffers) 5))
          (fastrevert-vc-test--counting-reverts counts
            ;; Each file written takes a while, as in a large repository, so
            ;; that the rebase outlasts the settle delay many times over.
            (fastrevert-vc-test--sh-while-running
             dir (concat "git -c filter.slow.smudge='sleep 0.02; cat' -c filter.slow.clean=cat"
                         " rebase -q main"))
            (should (fastrevert-test-wait-for
                     ;; The files end as they began, so wait for the reverts.
                     (lambda () (and (cl-every (lambda (buffer)
                                                 (and (gethash buffer counts)
                                                      (equal (fastrevert-vc-test--text buffer)
                                                             final)))
                                               buffers)
                                     (fastrevert-vc-test--settled-p)))
                     30)))
          (should (equal (mapcar (lambda (buffer) (gethash buffer counts)) buffers)
                         '(1 1 1 1 1))))))))

(ert-deftest fastrevert-vc-first-check-of-a-file-visited-during-an-operation-waits-for-it ()
  "A file visited while Git holds its lock is first checked when Git is done.
Its first check would otherwise read what the operation has written
so far, and the refresh that follows the operation would find the
buffer current and leave its VC state as it was mid-operation."
  (fastrevert-test-with-temp-dir dir
    (fastrevert-vc-test--with-mode dir
      (fastrevert-vc-test--sh dir "git init -q && printf 'old\\n' > f.txt && : > .git/index.lock")
      (unwind-protect
          (progn
            ;; The engine's first look at the file comes after the write.
            (fastrevert--mod-test-watch-fault 'stat-delay-ms 1000)
            (let ((buffer (find-file-noselect (expand-file-name "f.txt" dir))))
              (fastrevert-vc-test--sh dir "printf 'new\\n' > f.txt")
              (should (fastrevert-test-wait-for
                       (lambda () (fastrevert--watching-p buffer)) 30))
              (fastrevert--mod-test-watch-fault 'stat-delay-ms 0)
              (should (fastrevert-test-wait-for #'fastrevert-vc-test--settled-p))
              (should (equal (fastrevert-vc-test--text buffer) "old\n"))
              (fastrevert-vc-test--sh dir "rm .git/index.lock")
              (should (fastrevert-test-wait-for
                       (lambda () (equal (fastrevert-vc-test--text buffer) "new\n")) 30))))
        (fastrevert--mod-test-watch-fault 'stat-delay-ms 0)))))

(ert-deftest fastrevert-vc-stale-lock-delays-a-visible-buffer-only-up-to-the-limit ()
  "A lock left behind by a crashed Git holds a change no longer than the limit."
  (fastrevert-test-with-temp-dir dir
    (let ((fastrevert-vc-hold-limit 1))
      (fastrevert-vc-test--with-mode dir
        ;; A repository that has just been made counts as busy for a
        ;; moment; this one was made a minute ago.
        (fastrevert-vc-test--sh
         dir "git init -q && printf 'old\\n' > f.txt && touch -d '1 minute ago' .git .git/refs/heads")
        (let ((buffer (car (fastrevert-vc-test--visit (list (expand-file-name "f.txt" dir)))))
              (reverted-at nil))
          (set-window-buffer (selected-window) buffer)
          (unwind-protect
              (progn
                (should (get-buffer-window buffer 'visible))
                (fastrevert-vc-test--sh dir ": > .git/index.lock")
                (let ((written-at (float-time))
                      (note (lambda () (setq reverted-at (float-time)))))
                  (add-hook 'after-revert-hook note)
                  (unwind-protect
                      (progn
                        (fastrevert-vc-test--sh dir "printf 'new\\n' > f.txt")
                        (should (fastrevert-test-wait-for
                                 (lambda () (equal (fastrevert-vc-test--text buffer) "new\n"))
                                 30)))
                    (remove-hook 'after-revert-hook note))
                  (should (file-exists-p (expand-file-name ".git/index.lock" dir)))
                  (should (>= (- reverted-at written-at) 0.99))))
            (set-window-buffer (selected-window) (get-buffer-create "*scratch*"))))))))

(ert-deftest fastrevert-vc-find-file-hook-refresh-joins-the-batch ()
  "A revert that runs `find-file-hook' does not refresh the VC state twice."
  (fastrevert-test-with-temp-dir dir
    (fastrevert-vc-test--with-mode dir
      (fastrevert-vc-test--sh dir fastrevert-vc-test--branches)
      (let* ((log (expand-file-name "git.log" dir))
             (refreshes (make-hash-table :test #'eq))
             (count (lambda () (puthash (current-buffer) (1+ (gethash (current-buffer) refreshes 0))
                                        refreshes)))
             (followed-up (make-hash-table :test #'eq))
             (follow-up (lambda (function id &rest args)
                          (let* ((buffer (fastrevert--buffer-of id))
                                 (pending (and buffer (gethash buffer fastrevert--vc-pending))))
                            (apply function id args)
                            (when (and buffer (not pending)
                                       (gethash buffer fastrevert--vc-pending))
                              (puthash buffer t followed-up))))))
        (fastrevert-vc-test--with-git-log log
          (let ((buffers (fastrevert-vc-test--visit (directory-files-recursively dir "\\.txt\\'"))))
            (dolist (buffer buffers)
              (with-current-buffer buffer
                ;; Reverting without keeping the modes runs `find-file-hook',
                ;; and with it `vc-refresh-state', as `revert-buffer' does
                ;; when called by hand.
                (setq-local revert-buffer-function
                            (lambda (ignore-auto noconfirm)
                              (let ((revert-buffer-preserve-modes nil))
                                (revert-buffer--default ignore-auto noconfirm))))))
            (delete-file log)
            (advice-add 'vc-refresh-state :before count '((name . count-refreshes)))
            ;; A move of HEAD seen after a buffer's revert refreshes it once
            ;; more, by design (on a loaded machine Git can leave that much
            ;; time between the index and HEAD): such a buffer counts two.
            (advice-add 'fastrevert--on-vc-changed :around follow-up
                        '((name . note-follow-ups)))
            (unwind-protect
                (progn
                  (fastrevert-vc-test--sh dir "git checkout -q other")
                  (should (fastrevert-test-wait-for
                           (lambda () (and (cl-every (lambda (buffer)
                                                       (string-prefix-p
                                                        "other " (fastrevert-vc-test--text buffer)))
                                                     buffers)
                                           (fastrevert-vc-test--settled-p)))
                           30)))
              (advice-remove 'vc-refresh-state 'count-refreshes)
              (advice-remove 'fastrevert--on-vc-changed 'note-follow-ups))
            (should (cl-every (lambda (buffer)
                                (eql (gethash buffer refreshes)
                                     (if (gethash buffer followed-up) 2 1)))
                              buffers))
            ;; One batch asks Git at most three times; a follow-up is a
            ;; second batch.
            (should (<= (length (fastrevert-vc-test--log-lines log))
                        (if (zerop (hash-table-count followed-up)) 3 6)))))))))


;;;; The mode line follows the repository

(defun fastrevert-vc-test--mode-line (buffer)
  "Return BUFFER's `vc-mode' without properties, or nil."
  (let ((mode (buffer-local-value 'vc-mode buffer)))
    (and mode (substring-no-properties mode))))

(defun fastrevert-vc-test--wait-for-mode-lines (buffers text)
  "Wait until every buffer of BUFFERS has TEXT as its `vc-mode'."
  (should (fastrevert-test-wait-for
           (lambda () (cl-every (lambda (buffer)
                                  (equal (fastrevert-vc-test--mode-line buffer) text))
                                buffers))
           30)))

(defmacro fastrevert-vc-test--with-branches (spec &rest body)
  "Run BODY with the files of two branches visited.
SPEC is (DIR BUFFERS CHECK-VC-INFO): BODY runs in DIR, with BUFFERS
visiting the files of `fastrevert-vc-test--branches', on branch main,
under `fastrevert-mode' with `auto-revert-check-vc-info' set to the
value of CHECK-VC-INFO, once every buffer shows that branch."
  (declare (indent 1))
  (pcase-let ((`(,dir ,buffers ,check-vc-info) spec))
    `(fastrevert-test-with-temp-dir ,dir
       (fastrevert-vc-test--with-mode ,dir
         (setq auto-revert-check-vc-info ,check-vc-info)
         (fastrevert--apply-changed-settings)
         (fastrevert-vc-test--sh ,dir fastrevert-vc-test--branches)
         (let ((,buffers (fastrevert-vc-test--visit
                          (directory-files-recursively ,dir "\\.txt\\'"))))
           (fastrevert-vc-test--wait-for-mode-lines ,buffers " Git-main")
           ,@body)))))

(ert-deftest fastrevert-vc-check-vc-info-shows-a-branch-switch-at-once-without-polling ()
  "With `auto-revert-check-vc-info', a switch from outside reaches every mode line.
No file changes and polling is an hour away: the watch on HEAD tells."
  (let ((auto-revert-interval 3600))
    (fastrevert-vc-test--with-branches (dir buffers t)
      (fastrevert-vc-test--sh dir "git switch -q -c topic")
      (fastrevert-vc-test--wait-for-mode-lines buffers " Git-topic")
      (should-not (cl-some (lambda (timer)
                             (memq (timer--function timer) '(auto-revert-buffers
                                                             fastrevert--poll-stock-buffers)))
                           timer-list)))))

(ert-deftest fastrevert-vc-check-vc-info-shows-a-commit-and-a-stash-from-outside ()
  "With `auto-revert-check-vc-info', the state of a file follows a commit and a stash."
  (let ((auto-revert-interval 3600))
    (fastrevert-vc-test--with-branches (dir buffers t)
      (let ((edited (cl-find-if (lambda (buffer) (string-suffix-p "a/f0.txt" (buffer-file-name buffer)))
                                buffers)))
        (fastrevert-vc-test--sh dir "printf 'edited\\n' >> a/f0.txt")
        (fastrevert-vc-test--wait-for-mode-lines (list edited) " Git:main")
        ;; The commit changes no file: the branch and the index tell.
        (fastrevert-vc-test--sh dir "git commit -qam edit")
        (fastrevert-vc-test--wait-for-mode-lines (list edited) " Git-main")
        (fastrevert-vc-test--sh dir "printf 'again\\n' >> a/f0.txt")
        (fastrevert-vc-test--wait-for-mode-lines (list edited) " Git:main")
        (fastrevert-vc-test--sh dir "git stash -q")
        (fastrevert-vc-test--wait-for-mode-lines (list edited) " Git-main")
        (should (equal (fastrevert-vc-test--text edited) "main a 0\nedited\n"))))))

(ert-deftest fastrevert-vc-without-check-vc-info-a-switch-refreshes-no-buffer-it-does-not-revert ()
  "With `auto-revert-check-vc-info' nil, stock's meaning: no refresh without a revert."
  (fastrevert-vc-test--with-branches (dir buffers nil)
    (let ((reverted (car buffers)))
      (fastrevert-vc-test--sh dir "git switch -q -c topic")
      ;; The switch is reported before this write, which reverts one buffer.
      (fastrevert-vc-test--sh dir (format "printf 'x\\n' >> %s"
                                          (shell-quote-argument (buffer-file-name reverted))))
      (fastrevert-vc-test--wait-for-mode-lines (list reverted) " Git:topic")
      (should (fastrevert-test-wait-for #'fastrevert-vc-test--settled-p))
      (should (cl-every (lambda (buffer) (equal (fastrevert-vc-test--mode-line buffer) " Git-main"))
                        (cdr buffers))))))

(ert-deftest fastrevert-vc-head-moved-after-the-reverts-refreshes-their-mode-lines ()
  "Git moves HEAD after it has committed the index: the mode line follows it.
A stand-in operation writes the other branch's files and index under
index.lock and lets it go; only once every buffer has been reverted,
showing the old branch, does it move HEAD under HEAD.lock."
  (fastrevert-vc-test--with-branches (dir buffers nil)
    (fastrevert-vc-test--sh dir "git read-tree -m -u other")
    (should (fastrevert-test-wait-for
             (lambda () (and (cl-every (lambda (buffer)
                                         (string-prefix-p "other " (fastrevert-vc-test--text buffer)))
                                       buffers)
                             (fastrevert-vc-test--settled-p)))
             30))
    ;; Every file differs from main's, where HEAD still is.
    (fastrevert-vc-test--wait-for-mode-lines buffers " Git:main")
    (fastrevert-vc-test--sh
     dir "printf 'ref: refs/heads/other\\n' > .git/HEAD.lock && mv .git/HEAD.lock .git/HEAD")
    (fastrevert-vc-test--wait-for-mode-lines buffers " Git-other")))

(ert-deftest fastrevert-vc-early-mode-lines-are-the-ones-the-full-refresh-gives ()
  "A mode line shown early is the one stock `vc-refresh-state' then gives.
Of the files of one repository that Git answers for alike, in
whatever directory, one is refreshed and the others get its
`vc-mode'; a file with other codes,
one Git does not track, or one whose backend is not yet Git, gets
none."
  (fastrevert-test-with-temp-dir dir
    (let ((process-environment (fastrevert-vc-test--environment dir)))
      (let ((buffers (fastrevert-vc-test--visit-branches dir)))
        (unwind-protect
            (progn
              (fastrevert-vc-test--sh
               dir (concat "printf 'edited\\n' >> a/f0.txt && printf 'edited\\n' >> a/f1.txt"
                           " && printf 'new\\n' > a/new.txt && git add a/new.txt"
                           " && printf 'loose\\n' > a/loose.txt && git switch -q -c topic"))
              (let* ((extra (mapcar (lambda (name) (find-file-noselect (expand-file-name name dir)))
                                    '("a/new.txt" "a/loose.txt")))
                     (buffers (append buffers extra))
                     (never-git (car (last buffers 3))))
                (fastrevert-vc-call-with-batch
                 buffers (lambda () (mapc #'fastrevert-vc-test--refresh buffers)))
                ;; A file whose backend is not known yet gets no copy.
                (with-current-buffer never-git (vc-file-clearprops buffer-file-name))
                (dolist (buffer buffers)
                  (with-current-buffer buffer (setq vc-mode "stale")))
                (pcase-let ((`(,refreshed . ,shown)
                             (fastrevert-vc-call-with-batch
                              buffers (lambda ()
                                        (fastrevert-vc-show-early
                                         buffers #'fastrevert-vc-test--refresh)))))
                  ;; One per group: clean (in a/ and b/), edited, added.
                  (should (= (length refreshed) 3))
                  (should (= (length shown) (- (length buffers) 3 2)))
                  (should-not (memq never-git shown))
                  (should-not (cl-intersection extra shown))
                  (let ((early (mapcar (lambda (buffer)
                                         (plist-get (fastrevert-vc-test--state buffer) :vc-mode))
                                       shown)))
                    (should (member (car (car early)) '(" Git-topic" " Git:topic")))
                    (dolist (buffer buffers)
                      (fastrevert-vc-test--reset buffer)
                      (fastrevert-vc-test--refresh buffer))
                    (cl-loop for buffer in shown
                             for mode in early
                             do (ert-info ((buffer-file-name buffer))
                                  (should (equal mode (plist-get (fastrevert-vc-test--state buffer)
                                                                 :vc-mode)))))))))
          (dolist (buffer (buffer-list))
            (with-current-buffer buffer
              (when buffer-file-name
                (set-buffer-modified-p nil)
                (kill-buffer buffer)))))))))

(ert-deftest fastrevert-vc-check-vc-info-shows-many-mode-lines-early-then-refreshes-them ()
  "Many buffers due a VC refresh see their mode lines first, then the full refresh.
Each buffer ends with the state stock's refresh gives it, and nothing
is left pending."
  (let ((auto-revert-interval 3600)
        (fastrevert--vc-early-minimum 5)
        (early 0))
    (fastrevert-vc-test--with-branches (dir buffers t)
      (let ((count (lambda (result) (when (cdr result) (cl-incf early)) result)))
        (advice-add 'fastrevert-vc-show-early :filter-return count)
        (unwind-protect
            (progn
              (fastrevert-vc-test--sh dir "git switch -q -c topic")
              (fastrevert-vc-test--wait-for-mode-lines buffers " Git-topic")
              (should (fastrevert-test-wait-for #'fastrevert-vc-test--settled-p 30)))
          (advice-remove 'fastrevert-vc-show-early count)))
      (should (>= early 1))
      (should-not fastrevert--vc-shown-early)
      (let ((states (mapcar #'fastrevert-vc-test--state buffers)))
        (dolist (buffer buffers)
          (fastrevert-vc-test--reset buffer)
          (fastrevert-vc-test--refresh buffer))
        (cl-loop for buffer in buffers
                 for state in states
                 do (should (equal state (fastrevert-vc-test--state buffer))))))))

(ert-deftest fastrevert-vc-check-vc-info-shows-mercurial-commits-and-bookmarks-from-outside ()
  "With `auto-revert-check-vc-info', a Mercurial buffer's mode line follows the repository."
  (fastrevert-test-with-temp-dir dir
    (fastrevert-vc-test--with-mode dir
      (setq auto-revert-check-vc-info t)
      (fastrevert--apply-changed-settings)
      (fastrevert-vc-test--sh
       dir "hg init -q && printf 'a\\n' > a.txt && hg add -q a.txt && hg commit -q -u t -m one")
      (let ((buffer (car (fastrevert-vc-test--visit (list (expand-file-name "a.txt" dir)))))
            (node (lambda ()
                    (let ((default-directory dir))
                      (car (process-lines "hg" "log" "-r" "." "--template"
                                          "{shortest(node,6)}"))))))
        (fastrevert-vc-test--wait-for-mode-lines (list buffer) (concat " Hg-" (funcall node)))
        (fastrevert-vc-test--sh dir "printf 'b\\n' >> a.txt")
        (fastrevert-vc-test--wait-for-mode-lines (list buffer) (concat " Hg:" (funcall node)))
        ;; A commit changes no file: the dirstate tells.
        (fastrevert-vc-test--sh dir "hg commit -q -u t -m two")
        (fastrevert-vc-test--wait-for-mode-lines (list buffer) (concat " Hg-" (funcall node)))
        ;; Nor does a bookmark: the active one is what the mode line shows.
        (fastrevert-vc-test--sh dir "hg bookmark -q feature")
        (fastrevert-vc-test--wait-for-mode-lines (list buffer) " Hg-feature")))))

;;;; For each buffer, the text before the state

;; When one operation changes a visited file and the repository's control
;; files, stock auto-revert reverts the buffer and only then refreshes its
;; VC state.  These tests record, for each buffer, its reverts and every
;; change of its `vc-mode' through a run of operations, each run from
;; start to end while Emacs waits: while Emacs runs, the files stay as the
;; operation left them.  A change of `vc-mode' that comes while the
;; buffer's text differs from its unchanged file's, that is while a revert
;; of the buffer is pending, breaks the rule.

(defconst fastrevert-vc-test--order-fixture
  "set -e
git init -q -b main
for d in a b; do
  mkdir $d
  for i in 0 1 2 3 4; do printf '%s %s\\n' $d $i > $d/f$i.txt; done
done
git add .
git commit -qm base
git checkout -qb other
for f in b/*.txt; do printf 'other\\n' >> $f; done
git commit -qam other
git checkout -q main
for f in a/*.txt; do printf 'main\\n' >> $f; done
git commit -qam main
"
  "Shell script for two branches: main changes the files of a/, other those of b/.")

(defconst fastrevert-vc-test--order-operations
  '(("an edit" "printf 'edit\\n' >> a/f0.txt" " Git-main" ("a/f0.txt" . " Git:main"))
    ("a stash" "git stash -q" " Git-main")
    ("a checkout" "git checkout -q other" " Git-other")
    ("a commit" "printf 'topic\\n' >> b/f0.txt && git commit -qam topic" " Git-other")
    ("a rebase" "git rebase -q main" " Git-other"))
  "Operations run from outside, in order: (NAME SCRIPT MODE-LINE EXCEPTIONS...).
MODE-LINE is what every buffer shows once the operation is done, but
for those EXCEPTIONS names, (FILE . MODE-LINE) each.")

(defun fastrevert-vc-test--file-text (file)
  "Return the text in FILE, or nil if there is no such file."
  (and (file-exists-p file)
       (with-temp-buffer
         (insert-file-contents file)
         (buffer-string))))

(defun fastrevert-vc-test--revert-pending-p (buffer)
  "Return non-nil if BUFFER's text is not what its file holds.
BUFFER is unmodified, so that a check of it would revert it."
  (with-current-buffer buffer
    (and (not (buffer-modified-p))
         (let ((text (fastrevert-vc-test--file-text buffer-file-name)))
           (and text (not (equal text (buffer-substring-no-properties
                                       (point-min) (point-max)))))))))

(defmacro fastrevert-vc-test--recording-order (log buffers &rest body)
  "Run BODY with the reverts and `vc-mode' changes of BUFFERS logged in LOG.
LOG is a variable bound to a hash table; a buffer's entries, latest
first, are `revert' and (vc-mode TEXT PENDING), PENDING being non-nil
if a revert of the buffer was pending at that moment."
  (declare (indent 2))
  (let ((watcher (make-symbol "watcher"))
        (reverted (make-symbol "reverted")))
    `(let* ((,watcher (lambda (_symbol value operation where)
                        (when (and (eq operation 'set) (memq where ,buffers))
                          (push (list 'vc-mode (and value (substring-no-properties value))
                                      (fastrevert-vc-test--revert-pending-p where))
                                (gethash where ,log)))))
            (,reverted (lambda ()
                         (when (memq (current-buffer) ,buffers)
                           (push 'revert (gethash (current-buffer) ,log))))))
       (add-variable-watcher 'vc-mode ,watcher)
       (add-hook 'after-revert-hook ,reverted)
       (unwind-protect (progn ,@body)
         (remove-hook 'after-revert-hook ,reverted)
         (remove-variable-watcher 'vc-mode ,watcher)))))

(defun fastrevert-vc-test--order-done-p (dir buffers mode-line exceptions)
  "Return non-nil once the operation in DIR is shown in every buffer of BUFFERS.
Each buffer's text is its file's and its mode line MODE-LINE, or what
EXCEPTIONS gives for its file; nothing is left to do."
  (and (cl-every (lambda (buffer)
                   (and (not (fastrevert-vc-test--revert-pending-p buffer))
                        (equal (fastrevert-vc-test--mode-line buffer)
                               (or (cdr (assoc (file-relative-name (buffer-file-name buffer) dir)
                                               exceptions))
                                   mode-line))))
                 buffers)
       (fastrevert-vc-test--settled-p)))

(defun fastrevert-vc-test--order-through-operations ()
  "Run `fastrevert-vc-test--order-operations' and check the order they are shown in.
With `auto-revert-check-vc-info' on, no buffer's `vc-mode' may change
while a revert of that buffer is pending."
  (let ((auto-revert-interval 3600))
    (fastrevert-test-with-temp-dir dir
      (fastrevert-vc-test--with-mode dir
        (setq auto-revert-check-vc-info t)
        (fastrevert--apply-changed-settings)
        (fastrevert-vc-test--sh dir fastrevert-vc-test--order-fixture)
        (let ((buffers (fastrevert-vc-test--visit (directory-files-recursively dir "\\.txt\\'")))
              (log (make-hash-table :test #'eq)))
          (should (= (length buffers) 10))
          (fastrevert-vc-test--wait-for-mode-lines buffers " Git-main")
          (fastrevert-vc-test--recording-order log buffers
            (pcase-dolist (`(,name ,script ,mode-line . ,exceptions)
                           fastrevert-vc-test--order-operations)
              (ert-info (name)
                (fastrevert-vc-test--sh dir script)
                (should (fastrevert-test-wait-for
                         (lambda () (fastrevert-vc-test--order-done-p
                                     dir buffers mode-line exceptions))
                         30)))))
          (let ((sequences (mapcar (lambda (buffer)
                                     (cons (file-relative-name (buffer-file-name buffer) dir)
                                           (reverse (gethash buffer log))))
                                   buffers)))
            ;; Every buffer was reverted and had its mode line changed: the
            ;; recording saw what it checks.
            (should (cl-every (lambda (sequence)
                                (and (memq 'revert (cdr sequence))
                                     (assq 'vc-mode (cdr sequence))))
                              sequences))
            ;; No mode line changed before its buffer's pending revert.
            (let ((broken (delq nil (mapcar #'fastrevert-vc-test--out-of-order sequences))))
              (when broken
                (ert-fail (mapconcat #'identity broken "\n"))))))))))

(defun fastrevert-vc-test--out-of-order (sequence)
  "Describe SEQUENCE, (FILE ENTRIES...) as the order log holds them, if out of order.
Return nil if no `vc-mode' change of ENTRIES came while a revert was
pending; else a line that lists them, each change so marked."
  (and (cl-some (lambda (entry) (and (consp entry) (nth 2 entry))) (cdr sequence))
       (concat (car sequence) ": "
               (mapconcat (lambda (entry)
                            (if (eq entry 'revert)
                                "revert"
                              (format "%S%s" (nth 1 entry)
                                      (if (nth 2 entry) " BEFORE A PENDING REVERT" ""))))
                          (cdr sequence) ", "))))

(defmacro fastrevert-vc-test--with-late-file-records (&rest body)
  "Run BODY with every report of a changed file handled one check late.
Each `file-changed' record the engine sends is kept until the next
check of pending buffers (`fastrevert--revert-pending') has run, as if
the engine had seen the file's change that much later than the
repository's: a mode line refreshed in that check would come before
the revert."
  (declare (indent 0))
  (let ((late (make-symbol "late"))
        (keep (make-symbol "keep"))
        (hand-over (make-symbol "hand-over")))
    `(let* ((,late nil)
            (,keep (lambda (function &rest args)
                     (push (cons function args) ,late)
                     (fastrevert--schedule-check)))
            (,hand-over (lambda (&rest _)
                          (let ((calls (nreverse ,late)))
                            (setq ,late nil)
                            (dolist (call calls) (apply (car call) (cdr call)))))))
       (advice-add 'fastrevert--on-file-changed :around ,keep '((name . late-file-records)))
       (advice-add 'fastrevert--revert-pending :after ,hand-over '((name . late-file-records)))
       (unwind-protect (progn ,@body)
         (advice-remove 'fastrevert--on-file-changed 'late-file-records)
         (advice-remove 'fastrevert--revert-pending 'late-file-records)))))

(ert-deftest fastrevert-vc-mode-line-changes-only-after-the-revert-through-stash-checkout-commit-rebase ()
  "With `auto-revert-check-vc-info', no mode line changes before its buffer's revert.
An edit, a stash, a checkout, a commit and a rebase, each from outside."
  (fastrevert-vc-test--order-through-operations))

(ert-deftest fastrevert-vc-mode-line-waits-for-a-revert-reported-after-the-repository-change ()
  "A buffer whose file's change is reported late keeps its mode line until its revert.
Every change of a file reaches Lisp one check after the change of the
repository's index or HEAD that the same operation made."
  (fastrevert-vc-test--with-late-file-records
    (fastrevert-vc-test--order-through-operations)))

(ert-deftest fastrevert-vc-early-mode-lines-wait-for-a-revert-reported-after-the-repository-change ()
  "Mode lines shown early also wait for their buffers' reverts.
As `fastrevert-vc-mode-line-waits-for-a-revert-reported-after-the-repository-change',
with the early showing of mode lines for every batch."
  (let ((fastrevert--vc-early-minimum 1))
    (fastrevert-vc-test--with-late-file-records
      (fastrevert-vc-test--order-through-operations))))

;; What the order tests cannot time: a file changed while VC reads the
;; repository for its buffer.  A batch reads Git's answers before it looks
;; at the file; a refresh that reads as it goes, as one outside a batch or
;; of another backend does, is looked at again afterwards.
(ert-deftest fastrevert-vc-refresh-during-which-the-file-changes-is-taken-back ()
  "A VC refresh during which the buffer's file changes leaves the buffer as it was.
Its mode line and its file's VC properties are put back, and the
revert that the change brings refreshes them."
  (fastrevert-vc-test--with-branches (dir buffers nil)
    (let* ((buffer (car buffers))
           (file (buffer-file-name buffer))
           (before (fastrevert-vc-test--state buffer))
           (refreshes 0)
           (change (lambda ()
                     (when (eq (current-buffer) buffer)
                       (cl-incf refreshes)
                       (setq vc-mode " Git:seen-while-changing")
                       (vc-file-setprop file 'vc-state 'edited)
                       (write-region "changed\n" nil file nil 'silent)
                       ;; A time no earlier write of the file can have.
                       (set-file-times file (time-subtract nil 3600))))))
      (advice-add 'vc-refresh-state :after change '((name . change-during-refresh)))
      (unwind-protect
          (should-not (fastrevert--refresh-vc-of buffer))
        (advice-remove 'vc-refresh-state 'change-during-refresh))
      (should (= refreshes 1))
      (should (equal (fastrevert-vc-test--state buffer) before))
      (should (equal (fastrevert-vc-test--mode-line buffer) " Git-main"))
      ;; While its text waits for the revert, a refresh leaves it alone.
      (should-not (fastrevert-vc-call-with-batch
                   (list buffer) (lambda () (fastrevert--refresh-vc-of buffer))))
      (should (equal (fastrevert-vc-test--state buffer) before))
      (should (fastrevert-test-wait-for
               (lambda () (and (equal (fastrevert-vc-test--text buffer) "changed\n")
                               (equal (fastrevert-vc-test--mode-line buffer) " Git:main")))
               30)))))

(ert-deftest fastrevert-vc-batch-reads-git-before-it-looks-at-the-file ()
  "A batch asks Git first and looks at the buffer's file after.
A file changed just before Git reads the repository is then seen
changed, and its buffer keeps its mode line until its revert."
  (fastrevert-vc-test--with-branches (dir buffers nil)
    (let* ((buffer (car buffers))
           (file (buffer-file-name buffer))
           (before (fastrevert-vc-test--state buffer))
           (change (lambda (&rest _)
                     (write-region "changed\n" nil file nil 'silent)
                     (set-file-times file (time-subtract nil 3600)))))
      (advice-add 'fastrevert-vc--fetch :before change '((name . change-before-git)))
      (unwind-protect
          (should-not (fastrevert-vc-call-with-batch
                       (list buffer) (lambda () (fastrevert--refresh-vc-of buffer))))
        (advice-remove 'fastrevert-vc--fetch 'change-before-git))
      (should (equal (fastrevert-vc-test--state buffer) before))
      (should (fastrevert-test-wait-for
               (lambda () (and (equal (fastrevert-vc-test--text buffer) "changed\n")
                               (equal (fastrevert-vc-test--mode-line buffer) " Git:main")))
               30)))))

(provide 'fastrevert-vc-test)

;;; fastrevert-vc-test.el ends here
