;;; fastrevert-vc.el --- The VC state of many buffers at once -*- lexical-binding: t; -*-

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

;; After a checkout, Emacs refreshes the VC state of every reverted
;; buffer with `vc-refresh-state', and for a Git file that starts four
;; or five Git processes per buffer: `ls-files' and perhaps `ls-tree'
;; (is the file registered?), `status' (its state), `rev-parse' and
;; `symbolic-ref' (the revision and branch in the mode line).  A
;; checkout of 2,000 visited files then waits on 10,000 processes.
;;
;; `fastrevert-vc-call-with-batch' runs a function, such as one that
;; calls `vc-refresh-state' on each of a list of buffers, while Git's
;; answers for those buffers are ready in advance.  For each
;; repository it asks Git twice for the whole batch:
;;
;;   git status --porcelain=v2 -z --branch --untracked-files=all
;;       --ignored --no-renames -- DIRECTORIES
;;   git ls-files -c -z -- DIRECTORIES
;;
;; where DIRECTORIES are the directories of the batch's files, each as
;; a glob that matches only the entries directly inside it.  Then the
;; stock `vc-refresh-state' runs for every buffer, unchanged; when the
;; running vc-git starts one of the Git commands above for one file,
;; the answer is written from the batch's output, byte for byte what
;; that command prints, and no process starts.  Any other command, or
;; one this file cannot answer exactly, runs as usual.  So each buffer
;; gets what stock Emacs gives it, whatever the version of vc-git that
;; parses those answers, and other backends keep their own refresh.
;;
;; With thousands of buffers, what is left of a refresh is Lisp, and
;; most of it is spent making buffers for Git's output and looking for
;; each backend's control directory above each file or its master
;; file beside it.  So the few functions of vc-git that wrap the
;; commands above are answered where they start, without a buffer,
;; `vc-find-root' looks once per directory of the batch, and the master
;; files RCS, SCCS and SRC look for, and the directory CVS looks for,
;; are looked up in one listing of each directory (see "Where the
;; answers are given").

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'vc-hooks)

(defvar vc-git-program)
(defvar vc-git-log-output-coding-system)
(declare-function vc-git-root "vc-git" (file))

(defgroup fastrevert-vc nil
  "Version control in fastrevert's batches."
  :group 'fastrevert
  :prefix "fastrevert-vc-")

(defcustom fastrevert-vc-hold-limit 5.0
  "Longest time, in seconds, a running VCS operation holds back reverts.
While Git or Mercurial changes a repository (its `index.lock',
`HEAD.lock' or a branch's lock, a rebase in progress, an
`.hg/wlock'), fastrevert waits for it to finish and then reverts
every changed buffer once.  A lock left
behind by a crashed program must not stop reverting: once a hold has
lasted this long, the buffers are reverted anyway, visible or not,
and the repository's changes pass straight through until that lock
is gone.  Zero turns holding off."
  :type 'number)

;;;; Statistics

(defvar fastrevert-vc--counters (list :vc-batches 0 :vc-processes 0 :vc-answered 0)
  "Plist of counters: batches, Git processes run for them, commands answered.")

(defun fastrevert-vc-stats ()
  "Return a plist of the VC batch counters.
`:vc-batches' counts repositories asked for a batch, `:vc-processes'
the Git processes those batches started, and `:vc-answered' the Git
commands of `vc-refresh-state' answered without a process."
  (copy-sequence fastrevert-vc--counters))

(defun fastrevert-vc--count (counter &optional amount)
  "Add AMOUNT (default 1) to COUNTER of `fastrevert-vc--counters'."
  (cl-incf (plist-get fastrevert-vc--counters counter) (or amount 1)))

;;;; One repository's answers

(cl-defstruct (fastrevert-vc--repo (:constructor fastrevert-vc--repo-create (root))
                                   (:copier nil))
  "What Git said about one repository for one batch."
  (root nil :documentation "The work tree's top directory, with a final slash.")
  (index nil :documentation "Root-relative name to how often `ls-files -c' lists it.
A hash table, made at the size of Git's answer.")
  (status (make-hash-table :test #'equal)
          :documentation "Root-relative name to its porcelain v1 codes, in Git's order.")
  (oid nil :documentation "The commit HEAD names, or nil before the first commit.")
  (head nil :documentation "The full ref HEAD points to, or nil when detached.")
  (memo (make-hash-table :test #'equal)
        :documentation "Commands of `fastrevert-vc--repository-commands' run, and answers."))

(defconst fastrevert-vc--repository-commands
  '(("--no-pager" "rev-parse" "--short" "HEAD"))
  "Git commands whose output depends on the repository alone.
For these, which only some settings start (`vc-use-short-revision'),
a batch runs Git once per repository and gives every buffer the same
answer.")

(defvar fastrevert-vc--batch nil
  "The batch being refreshed, or nil.
A plist: `:tables' lists the tables of `fastrevert-vc--table' to keep
when it ends; `:repos' maps a root to its `fastrevert-vc--repo', or to
`failed' if Git could not answer for it; `:directories' maps a root
to a hash table of the root-relative directories of the batch's files
in it, `:places' an absolute file name to its `fastrevert-vc--place',
and `:buffers' a buffer of the batch to the place of its file;
`:roots' memoizes `vc-git-root' by directory, and `:truenames' the
true name of a root; `:listings' memoizes directory listings and
`:masters' what they say for `fastrevert-vc--masters';
`:versions' memoizes the answers of `version<=' under the
`:separator' and `:version-regexps' the batch started with; `:coding'
is the coding system of Git's output.")

(cl-defstruct (fastrevert-vc--place (:constructor fastrevert-vc--place-create
                                                  (root relative folder))
                                    (:copier nil))
  "Where a file of the batch is."
  (root nil :documentation "The Git work tree holding the file, with a final slash.")
  (relative nil :documentation "The file's name relative to ROOT.")
  (folder nil :documentation "(DIRECTORY . FOUND), shared by the files of one directory.
FOUND is an alist from a name `vc-find-root' looked for to what it
found, for `fastrevert-vc--find-root-advice'."))

(defun fastrevert-vc--glob-quote (name)
  "Return NAME with the characters special to Git's glob magic escaped."
  (replace-regexp-in-string "[][*?\\]" "\\\\\\&" name))

(defun fastrevert-vc--pathspecs (directories)
  "Return pathspecs matching exactly the entries directly in DIRECTORIES.
DIRECTORIES are root-relative, \"\" being the top.  A `:(glob)' star
does not cross a slash, so Git neither lists nor searches anything
deeper (an ignored `node_modules' below stays unread)."
  (mapcar (lambda (directory)
            (concat ":(glob)" (fastrevert-vc--glob-quote directory) "*"))
          directories))

(defconst fastrevert-vc--pathspec-variables
  '("GIT_LITERAL_PATHSPECS" "GIT_GLOB_PATHSPECS" "GIT_NOGLOB_PATHSPECS" "GIT_ICASE_PATHSPECS")
  "Environment variables that change how Git reads a pathspec.")

(defun fastrevert-vc--environment-plain-p ()
  "Return non-nil if no pathspec variable is set in `process-environment'.
The stock commands name one file literally; with any of these set by
the user they would match differently from the batch's globs."
  (not (cl-some (lambda (variable) (getenv variable))
                fastrevert-vc--pathspec-variables)))

(defun fastrevert-vc--git (root &rest args)
  "Run Git with ARGS in ROOT and return its output, or nil if it failed.
The environment is the one stock vc-git gives its background commands,
except that the batch's globs need pathspec magic."
  (let ((default-directory root)
        (coding-system-for-read (or coding-system-for-read vc-git-log-output-coding-system))
        (inhibit-null-byte-detection t)
        (process-environment
         (append '("GIT_DIR" "GIT_OPTIONAL_LOCKS=0") fastrevert-vc--pathspec-variables
                 process-environment)))
    (fastrevert-vc--count :vc-processes)
    (with-temp-buffer
      (and (eq 0 (apply #'call-process vc-git-program nil '(t nil) nil "--no-pager" args))
           (buffer-string)))))

(defun fastrevert-vc--parse-status (repo output)
  "Fill REPO from OUTPUT, Git's porcelain v2 status with `--branch' and `-z'.
Return nil if OUTPUT holds an entry this file cannot turn into the
porcelain v1 codes that stock vc-git reads."
  (let ((status (fastrevert-vc--repo-status repo))
        (entries nil)
        (ok t))
    (dolist (line (split-string output "\0" t))
      (let ((kind (aref line 0)))
        (cond
         ((string-prefix-p "# branch.oid " line)
          (let ((oid (substring line 13)))
            (setf (fastrevert-vc--repo-oid repo) (and (not (equal oid "(initial)")) oid))))
         ((string-prefix-p "# branch.head " line)
          (let ((head (substring line 14)))
            (setf (fastrevert-vc--repo-head repo)
                  (cond ((equal head "(detached)") nil)
                        ((string-prefix-p "refs/" head) head)
                        (t (concat "refs/heads/" head))))))
         ((eq kind ?#))
         ;; Ordinary and unmerged entries: `1 XY' and `u XY' followed
         ;; by 6 and 8 fields, then the name (which may hold spaces).
         ;; Version 1 writes a space where version 2 writes a dot.
         ((memq kind '(?1 ?u))
          (let ((fields (split-string line " ")))
            (push (cons (subst-char-in-string ?. ?\s (nth 1 fields))
                        (string-join (nthcdr (if (eq kind ?1) 8 10) fields) " "))
                  entries)))
         ((eq kind ??) (push (cons "??" (substring line 2)) entries))
         ((eq kind ?!) (push (cons "!!" (substring line 2)) entries))
         ;; A rename (`2') cannot happen with `--no-renames'; anything
         ;; else is a format this file does not know.
         (t (setq ok nil)))))
    ;; ENTRIES is in reverse; filing them by name from the last restores
    ;; Git's order for each name.
    (dolist (entry entries)
      (push (car entry) (gethash (cdr entry) status)))
    ok))

(defvar fastrevert-vc--spare-tables nil
  "Large hash tables of earlier batches, emptied for the next ones.
A batch of 1,000 buffers needs three tables of 1,000 entries or more,
120 KB to make anew each time.")

(defconst fastrevert-vc--spare-table-limit 4096
  "The most entries a table kept in `fastrevert-vc--spare-tables' has room for.")

(defconst fastrevert-vc--spare-tables-kept 4
  "The most tables `fastrevert-vc--spare-tables' keeps.")

(defun fastrevert-vc--table (test size)
  "Return an empty hash table of TEST with room for SIZE entries.
It is a spare one when there is one, and it is emptied and kept again
when the batch ends."
  (let ((table (cl-find-if (lambda (spare)
                             (and (eq (hash-table-test spare) test)
                                  (>= (hash-table-size spare) size)))
                           fastrevert-vc--spare-tables)))
    (if table
        (setq fastrevert-vc--spare-tables (delq table fastrevert-vc--spare-tables))
      (setq table (make-hash-table :test test :size size)))
    (when (<= (hash-table-size table) fastrevert-vc--spare-table-limit)
      (plist-put fastrevert-vc--batch :tables
                 (cons table (plist-get fastrevert-vc--batch :tables))))
    table))

(defun fastrevert-vc--keep-tables (tables)
  "Empty TABLES and keep them in `fastrevert-vc--spare-tables'.
The tables kept longest go first when there are too many."
  (dolist (table tables)
    (clrhash table)
    (push table fastrevert-vc--spare-tables))
  (let ((tail (nthcdr (1- fastrevert-vc--spare-tables-kept) fastrevert-vc--spare-tables)))
    (when tail (setcdr tail nil))))

(defun fastrevert-vc--count-nul (text)
  "Return the number of NUL characters in TEXT."
  (let ((count 0)
        (at 0))
    (while (setq at (string-search "\0" text at))
      (setq count (1+ count)
            at (1+ at)))
    count))

(defun fastrevert-vc--fetch (root directories)
  "Ask Git about the files in DIRECTORIES of the work tree ROOT.
DIRECTORIES is a hash table whose keys are root-relative directory
names, \"\" for the top.  Return a `fastrevert-vc--repo', or nil if Git
could not answer."
  (let ((repo (fastrevert-vc--repo-create root)))
    (let* ((specs (fastrevert-vc--pathspecs (hash-table-keys directories)))
           (status (apply #'fastrevert-vc--git root "status" "--porcelain=v2" "-z" "--branch"
                          "--untracked-files=all" "--ignored" "--no-renames" "--" specs))
           (index (and status
                       (apply #'fastrevert-vc--git root "ls-files" "-c" "-z" "--" specs))))
      (fastrevert-vc--count :vc-batches)
      (when (and index (fastrevert-vc--parse-status repo status))
        (let ((table (fastrevert-vc--table 'equal (fastrevert-vc--count-nul index)))
              (start 0)
              end)
          (while (setq end (string-search "\0" index start))
            (when (> end start)
              (let ((name (substring index start end)))
                (puthash name (1+ (gethash name table 0)) table)))
            (setq start (1+ end)))
          (setf (fastrevert-vc--repo-index repo) table))
        repo))))

;;;; Finding a buffer's repository

(defun fastrevert-vc--root-of (directory)
  "Return the Git work tree holding DIRECTORY, memoized for the batch."
  (let* ((roots (plist-get fastrevert-vc--batch :roots))
         (root (gethash directory roots 'unknown)))
    (if (not (eq root 'unknown))
        root
      (puthash directory (let ((root (fastrevert-vc--git-root directory)))
                           (and root (file-name-as-directory (expand-file-name root))))
               roots))))

(defun fastrevert-vc--git-root (directory)
  "Return the answer of `vc-git-root' for DIRECTORY.
Until vc-git is loaded, a DIRECTORY with no `.git' above it gets nil
without loading it, as stock's check of a file outside Git does."
  (when (or (featurep 'vc-git) (vc-find-root directory ".git"))
    (require 'vc-git)
    (vc-git-root directory)))

(defun fastrevert-vc--lexical-p (directory root)
  "Return non-nil if DIRECTORY inside ROOT reaches it through no symlink.
Git works from the true names, so a directory that a symlink leads to
is left to the stock refresh."
  (let* ((truenames (plist-get fastrevert-vc--batch :truenames))
         (true-root (or (gethash root truenames)
                        (puthash root (file-truename root) truenames))))
    (equal (file-relative-name (file-truename directory) true-root)
           (file-relative-name directory root))))

(cl-defstruct (fastrevert-vc--known (:constructor fastrevert-vc--known-create
                                                  (name handlers remote file directory))
                                    (:copier nil))
  "What earlier batches found of a buffer's file.
It holds while the buffer's `buffer-file-name' is still the string
NAME and `file-name-handler-alist' the list HANDLERS."
  (name nil :documentation "The `buffer-file-name' this was found for.")
  (handlers nil :documentation "The `file-name-handler-alist' it was found under.")
  (remote nil :documentation "What `file-remote-p' says of NAME.")
  (file nil :documentation "NAME expanded.")
  (directory nil :documentation "The directory of FILE.")
  (place nil :documentation "The `fastrevert-vc--place' of FILE in the last batch.
It serves again while its repository is the same."))

(defvar fastrevert-vc--known-files (make-hash-table :test #'eq :weakness 'key)
  "Buffer to the `fastrevert-vc--known' of its file.
A batch of 1,000 buffers would otherwise make half a megabyte of new
strings and places for the same answers.")

(defun fastrevert-vc--what-is-known (buffer name)
  "Return what is known of the file of BUFFER, which visits NAME.
Find it anew unless what `fastrevert-vc--known-files' keeps still
holds."
  (let ((known (gethash buffer fastrevert-vc--known-files)))
    (if (and known
             (eq (fastrevert-vc--known-name known) name)
             (eq (fastrevert-vc--known-handlers known) file-name-handler-alist))
        known
      (let ((file (expand-file-name name)))
        (puthash buffer (fastrevert-vc--known-create name file-name-handler-alist
                                                     (file-remote-p name)
                                                     file (file-name-directory file))
                 fastrevert-vc--known-files)))))

(defun fastrevert-vc--relative (name root)
  "Return NAME relative to ROOT, \"\" for ROOT itself.
Both are expanded; below ROOT the relative name is the rest, which
`file-relative-name' finds slowly."
  (if (string-prefix-p root name)
      (substring name (length root))
    (let ((relative (file-relative-name name root)))
      (if (equal relative "./") "" relative))))

(defun fastrevert-vc--collect (buffers places &optional by-buffer)
  "Return a hash table from Git root to the directories of BUFFERS' files.
The directories of a root are the keys of a hash table, each relative
to the root.  Only local buffers in a Git work tree are counted, and
only when nothing in the environment changes how Git reads a
pathspec.  Each file counted is entered in the hash table PLACES, as
the key of its `fastrevert-vc--place', and its buffer in the hash
table BY-BUFFER, when given, as the key of the same place."
  (let ((directories (make-hash-table :test #'equal :size 4))
        (folders (make-hash-table :test #'equal :size 32)))
    (when (fastrevert-vc--environment-plain-p)
      (dolist (buffer buffers)
        (let* ((name (and (buffer-live-p buffer) (buffer-local-value 'buffer-file-name buffer)))
               (known (and name (fastrevert-vc--what-is-known buffer name))))
          (unless (or (null known) (fastrevert-vc--known-remote known))
            (let* ((file (fastrevert-vc--known-file known))
                   (directory (fastrevert-vc--known-directory known))
                   (root (fastrevert-vc--root-of directory))
                   (folder (and root (gethash directory folders 'unknown))))
              ;; A folder is nil for a directory reached through a symlink.
              (when (eq folder 'unknown)
                (setq folder (puthash directory
                                      (and (fastrevert-vc--lexical-p directory root)
                                           (list directory))
                                      folders))
                (when folder
                  (puthash (fastrevert-vc--relative directory root)
                           t
                           (or (gethash root directories)
                               (puthash root (make-hash-table :test #'equal :size 32)
                                        directories)))))
              (when folder
                (let ((place (fastrevert-vc--known-place known)))
                  (if (and place (equal (fastrevert-vc--place-root place) root))
                      ;; The folder holds what this batch found in it.
                      (setf (fastrevert-vc--place-folder place) folder)
                    (setq place (fastrevert-vc--place-create
                                 root (fastrevert-vc--relative file root) folder))
                    (setf (fastrevert-vc--known-place known) place))
                  (puthash file place places)
                  (when by-buffer (puthash buffer place by-buffer)))))))))
    directories))

;;;; Answering vc-git's commands

(defun fastrevert-vc--repo-of-root (root)
  "Return the batch's answers for the Git work tree ROOT, or nil.
They are fetched now, for all of the batch's files in that repository,
if this is the first time the repository is asked about."
  (let* ((repos (plist-get fastrevert-vc--batch :repos))
         (repo (gethash root repos)))
    (cond ((fastrevert-vc--repo-p repo) repo)
          (repo nil)
          (t (let ((directories (gethash root (plist-get fastrevert-vc--batch :directories))))
               (and directories
                    (let ((fetched (fastrevert-vc--fetch root directories)))
                      (puthash root (or fetched 'failed) repos)
                      fetched)))))))

(defun fastrevert-vc-fetch-for (buffer)
  "Have Git's answers for BUFFER read now, if the running batch gives any.
Return non-nil if it does: a buffer whose file is found unchanged
after this was the same file while Git read it."
  (let ((place (and fastrevert-vc--batch
                    (gethash buffer (plist-get fastrevert-vc--batch :buffers)))))
    (when place
      (with-current-buffer buffer
        (when (fastrevert-vc--usable-p)
          (fastrevert-vc--repo-of-root (fastrevert-vc--place-root place)))))))

(defun fastrevert-vc--repo-for (directory)
  "Return the batch's answers for the repository of DIRECTORY, or nil."
  (let ((root (fastrevert-vc--root-of directory)))
    (and root (fastrevert-vc--repo-of-root root))))

(defun fastrevert-vc--place-of (file)
  "Return the `fastrevert-vc--place' of FILE, an absolute name, or nil.
Only a file of the running batch has one."
  (and fastrevert-vc--batch (stringp file)
       (gethash file (plist-get fastrevert-vc--batch :places))))

(defun fastrevert-vc--answers-for (file)
  "Return (REPO . RELATIVE) for FILE, an absolute name, or nil.
FILE must be a file of the batch; REPO answers for its repository, and
RELATIVE is FILE relative to the repository's root."
  (let ((place (fastrevert-vc--place-of file)))
    (and place
         (let ((repo (fastrevert-vc--repo-of-root (fastrevert-vc--place-root place))))
           (and repo (cons repo (fastrevert-vc--place-relative place)))))))

(defun fastrevert-vc--file-in (name)
  "Return (REPO . RELATIVE) for NAME, a file named from `default-directory'.
NAME must be a file of the batch, in the repository Git finds from
`default-directory'; see `fastrevert-vc--answers-for'.  Return nil
otherwise."
  (let* ((file (expand-file-name name))
         (place (fastrevert-vc--place-of file)))
    (and place
         (equal (fastrevert-vc--place-root place) (fastrevert-vc--root-of default-directory))
         (fastrevert-vc--answers-for file))))

(defun fastrevert-vc--usable-p ()
  "Return non-nil if the batch can answer for Git in the current setting.
vc-git reads Git's output in `coding-system-for-read', or else in
`vc-git-log-output-coding-system', and the batch's answers are in the
coding system the batch read with; a remote `default-directory' runs
Git on another machine.  A batch answers once it has found its files
of Git's (its `:directories')."
  (and fastrevert-vc--batch
       (plist-get fastrevert-vc--batch :directories)
       (eq (or coding-system-for-read vc-git-log-output-coding-system)
           (plist-get fastrevert-vc--batch :coding))
       (not (file-remote-p default-directory))))

(defun fastrevert-vc--file-command (args)
  "Return which question about one file the vc-git command ARGS asks, or nil.
ARGS are what vc-git passes after the program name, less the file
name that ends them.  The question is `index' (does the index list
the file?), `head' (does HEAD?), `status', or `status-ignored' (its
status, ignored files included)."
  (pcase args
    ('("--no-pager" "ls-files" "-c" "-z" "--") 'index)
    ('("--no-pager" "ls-tree" "--name-only" "-z" "HEAD" "--") 'head)
    ('("--no-pager" "status" "--porcelain" "-z" "--untracked-files" "--") 'status)
    ('("--no-pager" "status" "--porcelain" "-z" "--untracked-files" "--ignored" "--")
     'status-ignored)))

(defun fastrevert-vc--in-head-p (repo relative)
  "Return non-nil if HEAD of REPO has RELATIVE, a name its index lacks.
Then HEAD has it exactly when the index records its deletion."
  (and (fastrevert-vc--repo-oid repo)
       (cl-some (lambda (code) (eq (aref code 0) ?D))
                (gethash relative (fastrevert-vc--repo-status repo)))))

(defun fastrevert-vc--file-answer (question repo relative)
  "Return (EXIT . OUTPUT) of Git for QUESTION about RELATIVE in REPO, or nil.
QUESTION is a value of `fastrevert-vc--file-command'; nil means the
command has to run."
  (pcase question
    ('index
     (cons 0 (apply #'concat (make-list (gethash relative (fastrevert-vc--repo-index repo) 0)
                                        (concat relative "\0")))))
    ;; Asked only for a name the index lacks.
    ('head
     (cond ((gethash relative (fastrevert-vc--repo-index repo)) nil)
           ((null (fastrevert-vc--repo-oid repo)) (cons 128 ""))
           ((fastrevert-vc--in-head-p repo relative) (cons 0 (concat relative "\0")))
           (t (cons 0 ""))))
    ((or 'status 'status-ignored)
     (cons 0 (mapconcat (lambda (code) (concat code " " relative "\0"))
                        (cl-remove-if (lambda (code) (and (eq question 'status)
                                                          (equal code "!!")))
                                      (gethash relative (fastrevert-vc--repo-status repo)))
                        "")))))

(defun fastrevert-vc--repository-answer (args run)
  "Return (EXIT . OUTPUT) for the Git command ARGS of the repository, or nil.
ARGS are what vc-git passes after the program name, and the
repository is the one of `default-directory'.  RUN is a function that
runs the command and returns the same, for a command answered once
per repository; when RUN is nil, such a command is not answered."
  (pcase args
    ('("--no-pager" "rev-parse" "HEAD")
     (when-let ((repo (fastrevert-vc--repo-for default-directory)))
       (let ((oid (fastrevert-vc--repo-oid repo)))
         (if oid (cons 0 (concat oid "\n")) (cons 128 "HEAD\n")))))
    ('("--no-pager" "symbolic-ref" "HEAD")
     (when-let ((repo (fastrevert-vc--repo-for default-directory)))
       (let ((head (fastrevert-vc--repo-head repo)))
         (if head (cons 0 (concat head "\n")) (cons 128 "")))))
    ((guard (and run (member args fastrevert-vc--repository-commands)))
     (when-let ((repo (fastrevert-vc--repo-for default-directory)))
       (let ((memo (fastrevert-vc--repo-memo repo)))
         (or (gethash args memo) (puthash args (funcall run) memo)))))))

(defun fastrevert-vc--answer (args run)
  "Return (EXIT . OUTPUT) for the Git command ARGS, or nil to run it.
ARGS are what vc-git passes after the program name.  RUN is as for
`fastrevert-vc--repository-answer'."
  (let ((question (and args (fastrevert-vc--file-command (butlast args)))))
    (if (not question)
        (fastrevert-vc--repository-answer args run)
      (when-let ((place (fastrevert-vc--file-in (car (last args)))))
        (fastrevert-vc--file-answer question (car place) (cdr place))))))

;;;; Where the answers are given

;; vc-git starts Git through `process-file', and most of its commands go
;; through a few functions of its own.  Answering at `process-file'
;; covers every caller, but each of those functions first makes a
;; buffer for Git's output, and with thousands of live buffers making
;; and killing one costs more than the rest of the refresh: Emacs looks
;; its name up in the list of all buffers.  So the functions of a
;; refresh are answered where they start, for the files of the batch,
;; and `process-file' answers the rest.  Every answer is what the
;; function returns after the same commands, so each buffer still gets
;; what the running vc-git makes of Git's output.

(defun fastrevert-vc--process-file-advice (function program &optional infile buffer display
                                                    &rest args)
  "Answer a Git command of a batch refresh, or call FUNCTION to run it.
FUNCTION is `process-file'; PROGRAM, INFILE, BUFFER, DISPLAY and ARGS
are its arguments.  Only output that goes to the current buffer, with
the error output discarded, is answered."
  (let ((answer (and (fastrevert-vc--usable-p)
                     (null infile) (null display)
                     (equal buffer '(t nil))
                     (equal program vc-git-program)
                     (fastrevert-vc--answer
                      args
                      (lambda ()
                        (fastrevert-vc--count :vc-processes)
                        (with-temp-buffer
                          (let ((exit (apply function program nil '(t nil) nil args)))
                            (cons exit (buffer-string)))))))))
    (if (not answer)
        (apply function program infile buffer display args)
      (fastrevert-vc--count :vc-answered)
      (insert (cdr answer))
      (car answer))))

(defun fastrevert-vc--run-command-string-advice (function file &rest args)
  "Return Git's output for FILE and ARGS from the batch, or call FUNCTION.
FUNCTION is `vc-git--run-command-string', which runs Git with ARGS,
and the name of FILE relative to `default-directory' when FILE is
non-nil, and returns the output if Git succeeded."
  (let ((answer (and (fastrevert-vc--usable-p)
                     (let ((command (cons "--no-pager" args)))
                       (cond ((null file) (fastrevert-vc--repository-answer command nil))
                             ((stringp file)
                              (fastrevert-vc--answer (append command (list file)) nil)))))))
    (if (not answer)
        (apply function file args)
      (fastrevert-vc--count :vc-answered)
      (and (eql (car answer) 0) (cdr answer)))))

(defun fastrevert-vc--registered-advice (function file)
  "Return whether Git tracks FILE, from the batch, or call FUNCTION.
FUNCTION is `vc-git-registered'.  It lists FILE from the index, and
from HEAD when the index lacks it, and says yes if either names it."
  (let ((place (and (stringp file) (fastrevert-vc--usable-p)
                    (fastrevert-vc--answers-for (expand-file-name file)))))
    (if (not place)
        (funcall function file)
      (fastrevert-vc--count :vc-answered)
      (pcase-let ((`(,repo . ,relative) place))
        (and (or (gethash relative (fastrevert-vc--repo-index repo))
                 (fastrevert-vc--in-head-p repo relative))
             t)))))

(defvar vc-use-short-revision)

(defun fastrevert-vc--rev-parse-advice (function revision)
  "Call FUNCTION for REVISION once per repository of the batch.
FUNCTION is `vc-git--rev-parse', and REVISION must be \"HEAD\": that
names one commit for every file of a repository, while the settings
that shape the answer stay the same."
  (let ((repo (and (equal revision "HEAD") (fastrevert-vc--usable-p)
                   (fastrevert-vc--repo-for default-directory))))
    (if (not repo)
        (funcall function revision)
      (let* ((memo (fastrevert-vc--repo-memo repo))
             (key (list 'rev-parse revision vc-git-program
                        (bound-and-true-p vc-use-short-revision)))
             (known (or (gethash key memo)
                        (puthash key (list (funcall function revision)) memo))))
        ;; Each caller gets a string of its own, as from Git.
        (and (car known) (copy-sequence (car known)))))))

(defun fastrevert-vc--find-root-advice (function file witness)
  "Call FUNCTION for FILE and WITNESS once per directory of the batch.
FUNCTION is `vc-find-root', which every backend's `registered' check
calls in turn; for a file that is not a directory, what it finds
depends on the file's directory alone."
  (let ((place (and (stringp witness) (fastrevert-vc--place-of file))))
    (if (not place)
        (funcall function file witness)
      (let* ((folder (fastrevert-vc--place-folder place))
             (found (assoc witness (cdr folder))))
        (unless found
          (setq found (cons witness (funcall function file witness)))
          (push found (cdr folder)))
        (and (cdr found) (copy-sequence (cdr found)))))))

(defun fastrevert-vc--listing (directory)
  "Return the list of names in DIRECTORY, memoized for the batch.
The list holds \".\" and \"..\" too, so it is never empty.  Return
`missing' when DIRECTORY does not exist, and nil when it cannot be
listed, is handled by a file name handler, or compares names without
regard to case (a listing then cannot tell what is absent)."
  (let* ((listings (plist-get fastrevert-vc--batch :listings))
         (listing (gethash directory listings 'unknown)))
    (if (not (eq listing 'unknown))
        listing
      (puthash directory
               (and (file-name-absolute-p directory)
                    (not (find-file-name-handler directory 'file-exists-p))
                    (condition-case nil
                        (let ((names (directory-files directory nil nil t)))
                          (and (not (file-name-case-insensitive-p directory))
                               (member "." names)
                               names))
                      (file-missing 'missing)
                      (file-error nil)))
               listings))))

(defconst fastrevert-vc--master-template-regexp
  "\\`%s\\(\\(?:[^%/]*/\\)*\\)\\([^%/]*\\)%s\\([^%/]*\\)\\'"
  "A master template a listing can answer for.
It names, below the file's directory, subdirectories (group 1) and a
name made of a prefix (group 2), the file's own name and a suffix
\(group 3).")

(defun fastrevert-vc--template-masters (directory template bases)
  "Enter in BASES the names in DIRECTORY whose master TEMPLATE may find.
Return nil when TEMPLATE cannot be answered from a listing: a template
of another form, a function other than SCCS's project directory search
when PROJECTDIR is set, or a directory that cannot be listed."
  (cond
   ((eq template 'vc-sccs-search-project-dir) (not (getenv "PROJECTDIR")))
   ((and (stringp template) (string-match fastrevert-vc--master-template-regexp template))
    (let* ((prefix (match-string 2 template))
           (suffix (match-string 3 template))
           (affixes (+ (length prefix) (length suffix)))
           (listing (fastrevert-vc--listing (concat directory (match-string 1 template)))))
      (cond ((eq listing 'missing) t)
            (listing
             (dolist (name listing t)
               (when (and (>= (length name) affixes)
                          (string-prefix-p prefix name)
                          (string-suffix-p suffix name))
                 (puthash (substring name (length prefix) (- (length name) (length suffix)))
                          t bases)))))))))

(defun fastrevert-vc--masters (directory templates)
  "Return the names in DIRECTORY that TEMPLATES may find a master for.
The value, memoized for the batch, is a hash table of names without
directory, or `unknown' when some template cannot be answered from a
listing (see `fastrevert-vc--template-masters')."
  (let* ((memo (plist-get fastrevert-vc--batch :masters))
         (known (assq templates (gethash directory memo))))
    (if known
        (cdr known)
      (let* ((bases (make-hash-table :test #'equal :size 8))
             (masters (if (cl-every (lambda (template)
                                      (fastrevert-vc--template-masters directory template bases))
                                    templates)
                          bases
                        'unknown)))
        (push (cons templates masters) (gethash directory memo))
        masters))))

(defun fastrevert-vc--check-master-templates-advice (function file templates)
  "Call FUNCTION for FILE and TEMPLATES unless no master can exist.
FUNCTION is `vc-check-master-templates', with which the RCS, SCCS and
SRC backends check, before Git's turn, whether they register a file.
For a file of the batch, each directory its templates name is listed
once; when no listed name can be a master of the file, return what
FUNCTION returns when it finds none, without looking any up."
  (let* ((place (fastrevert-vc--place-of file))
         (masters (and place (fastrevert-vc--masters
                              (car (fastrevert-vc--place-folder place)) templates))))
    (if (and (hash-table-p masters) (not (gethash (file-name-nondirectory file) masters)))
        (mapcar #'ignore templates)
      (funcall function file templates))))

(defun fastrevert-vc--cvs-registered-advice (function file)
  "Call FUNCTION for FILE unless FILE's directory surely has no CVS subdirectory.
FUNCTION is `vc-cvs-registered', which registers nothing unless
CVS/Entries beside FILE can be read; for a file of the batch, the
listing of its directory tells."
  (let* ((place (fastrevert-vc--place-of file))
         (listing (and place (fastrevert-vc--listing (car (fastrevert-vc--place-folder place))))))
    (unless (and (consp listing) (not (member "CVS" listing)))
      (funcall function file))))

(defun fastrevert-vc--version<=-advice (function v1 v2)
  "Call FUNCTION on the versions V1 and V2 once per batch.
FUNCTION is `version<=', which vc-git's state check calls with the
same two versions for every file; its answer depends on them and on
how versions are read, which the batch notes when it starts."
  (let ((known (and fastrevert-vc--batch (stringp v1) (stringp v2)
                    (eq version-separator (plist-get fastrevert-vc--batch :separator))
                    (eq version-regexp-alist (plist-get fastrevert-vc--batch :version-regexps))
                    (plist-get fastrevert-vc--batch :versions))))
    (if (not known)
        (funcall function v1 v2)
      (let* ((key (cons v1 v2))
             (answer (gethash key known 'unknown)))
        (if (eq answer 'unknown) (puthash key (funcall function v1 v2) known) answer)))))

(defconst fastrevert-vc--advice
  '((process-file . fastrevert-vc--process-file-advice)
    (vc-git--run-command-string . fastrevert-vc--run-command-string-advice)
    (vc-git-registered . fastrevert-vc--registered-advice)
    (vc-git--rev-parse . fastrevert-vc--rev-parse-advice)
    (vc-find-root . fastrevert-vc--find-root-advice)
    (vc-check-master-templates . fastrevert-vc--check-master-templates-advice)
    (vc-cvs-registered . fastrevert-vc--cvs-registered-advice)
    (version<= . fastrevert-vc--version<=-advice))
  "The functions a batch answers for, each with its advice.
The advice is innermost, so that any other advice on these functions
still runs as it would around the stock functions.  Outside a batch
it calls the function unchanged.")

(defun fastrevert-vc--advise ()
  "Put the advice of `fastrevert-vc--advice' on those of its functions defined.
It stays on until `fastrevert-vc-unadvise': adding and removing eight
pieces of advice around each batch makes more garbage than refreshing
a hundred buffers."
  (pcase-dolist (`(,symbol . ,advice) fastrevert-vc--advice)
    (when (and (fboundp symbol) (not (advice-member-p advice symbol)))
      (advice-add symbol :around advice '((depth . 100))))))

(defun fastrevert-vc-unadvise ()
  "Take the advice of VC batches off again."
  (pcase-dolist (`(,symbol . ,advice) fastrevert-vc--advice)
    (advice-remove symbol advice)))

;;;; Showing the state early

(defun fastrevert-vc-show-early (buffers refresh &optional current-p)
  "Show in BUFFERS' mode lines the VC state their refresh will give them.
Call this inside `fastrevert-vc-call-with-batch' for BUFFERS.  Files
of one repository that Git answers for alike, with the same count of
index entries and the same status codes, get the same `vc-mode' from
stock's `vc-refresh-state', whatever their directories: vc-git's
mode line says the state, the backend and the revision, not the
file.  REFRESH is called on the first buffer of each such group to
refresh it in full; every other buffer of the group whose file Git
already backed gets that `vc-mode' at once, the same string (stock
never changes one in place, and copies of 1,000 of them would cost a
garbage collection).  Their full refresh, which
sets the rest of their VC state and a string of their own, is still
to be done.  A file Git does not track, or one the batch cannot
answer for, is in no group.  With CURRENT-P, a function of a buffer
that returns nil while its text waits for a revert, REFRESH returns
non-nil if the buffer shows its refreshed state, the first buffer of
a group for which it does gives the string, and only to those that
CURRENT-P accepts.  Return (REFRESHED . SHOWN): the buffers REFRESH
was called on, and those given the string."
  (let ((by-buffer (plist-get fastrevert-vc--batch :buffers))
        ;; A repository's answers to its groups: ((COUNT . CODES)
        ;; BUFFERS...), the buffers in reverse.
        (repos (make-hash-table :test #'eq))
        (groups nil))
    (dolist (buffer buffers)
      (let* ((place (and by-buffer (gethash buffer by-buffer)))
             (repo (and place (fastrevert-vc--repo-of-root (fastrevert-vc--place-root place))))
             (relative (and repo (fastrevert-vc--place-relative place)))
             (count (if repo (gethash relative (fastrevert-vc--repo-index repo) 0) 0)))
        (when (> count 0)
          (let* ((key (cons count (gethash relative (fastrevert-vc--repo-status repo))))
                 (group (assoc key (gethash repo repos))))
            (if group
                (push buffer (cdr group))
              (setq group (list key buffer))
              (push group (gethash repo repos))
              (push group groups))))))
    (let ((refreshed nil)
          (shown nil))
      (dolist (group (nreverse groups))
        (let ((members (nreverse (cdr group)))
              (first nil))
          (while (and members (not first))
            (let ((buffer (pop members)))
              (push buffer refreshed)
              (when (or (funcall refresh buffer) (not current-p))
                (setq first buffer))))
          (let ((mode (and first (buffer-local-value 'vc-mode first))))
            (when (and (stringp mode)
                       (eq (vc-file-getprop (buffer-local-value 'buffer-file-name first)
                                            'vc-backend)
                           'Git))
              (dolist (buffer members)
                (when (and (eq (vc-file-getprop (buffer-local-value 'buffer-file-name buffer)
                                                'vc-backend)
                               'Git)
                           (or (not current-p) (funcall current-p buffer)))
                  (with-current-buffer buffer
                    (setq vc-mode mode)
                    (force-mode-line-update))
                  (push buffer shown)))))))
      (cons refreshed shown))))

;;;; Entry point

(defun fastrevert-vc-call-with-batch (buffers function)
  "Call FUNCTION with Git's answers for BUFFERS ready, and return its value.
While FUNCTION runs, the Git commands that `vc-refresh-state' starts
for a file of BUFFERS are answered from two Git processes per
repository, run when the repository is first asked about,
`vc-find-root' looks once per directory of BUFFERS, the master files
of RCS, SCCS and SRC and the control directory of CVS are looked for
in one listing of each directory, and `version<=' compares two
versions once.  Buffers outside Git, or other backends' commands, are
not affected."
  (if (or fastrevert-vc--batch (not (memq 'Git vc-handled-backends)))
      (funcall function)
    (let* ((fastrevert-vc--batch
            (list :tables nil
                  :repos (make-hash-table :test #'equal :size 4)
                  :roots (make-hash-table :test #'equal :size 16)
                  :truenames (make-hash-table :test #'equal :size 4)
                  :listings (make-hash-table :test #'equal :size 32)
                  :masters (make-hash-table :test #'equal :size 16)
                  :versions (make-hash-table :test #'equal :size 4)
                  :separator version-separator
                  :version-regexps version-regexp-alist))
           (places (fastrevert-vc--table 'equal (length buffers)))
           (by-buffer (fastrevert-vc--table 'eq (length buffers))))
      (unwind-protect
          (progn
            (setq fastrevert-vc--batch
                  (nconc fastrevert-vc--batch (list :places places :buffers by-buffer)))
            (let ((directories (fastrevert-vc--collect buffers places by-buffer)))
              (unless (zerop (hash-table-count directories))
                ;; Until now no Git command was answered (see
                ;; `fastrevert-vc--usable-p'), and with no file of Git's
                ;; none is.
                (setq fastrevert-vc--batch
                      (nconc fastrevert-vc--batch
                             (list :directories directories
                                   :coding (or coding-system-for-read
                                               vc-git-log-output-coding-system))))
                (fastrevert-vc--advise)))
            (funcall function))
        (fastrevert-vc--keep-tables (plist-get fastrevert-vc--batch :tables))))))

(provide 'fastrevert-vc)

;;; fastrevert-vc.el ends here
