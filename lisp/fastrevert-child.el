;;; fastrevert-child.el --- Starting a child as stock Emacs starts it -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; What `fastrevert-call-process' and `fastrevert-make-process' share
;; to start a child the way `call-process' and `make-process' do: the
;; working directory, the program found on `exec-path', the
;; environment block, the arguments and coding systems, and the error
;; stock Emacs signals when one of them is wrong.  The module gets all
;; of it as plain bytes; the policy is here.

;;; Code:

(require 'cl-lib)
(require 'fastrevert-engine)

(declare-function fastrevert--mod-accessible-directory-p "fastrevert-module" (directory))
(declare-function fastrevert--mod-strerror "fastrevert-module" (name))
(declare-function fastrevert--mod-first-executable "fastrevert-module" (candidates))
(declare-function fastrevert--mod-signal-number "fastrevert-module" (name))

;;;; File names, the working directory, the program and the environment

(defun fastrevert--process-encode-file (file)
  "Return FILE encoded for the file system, as Emacs's ENCODE_FILE does."
  (if (multibyte-string-p file)
      (encode-coding-string file (or file-name-coding-system
                                     default-file-name-coding-system))
    file))

(defun fastrevert--process-unquote (file)
  "Return FILE without a leading \"/:\" quote."
  (if (string-prefix-p "/:" file) (substring file 2) file))

(defun fastrevert--process-strerror (name)
  "Return the system's text for the errno NAME, decoded."
  (decode-coding-string (fastrevert--mod-strerror name)
                        (or locale-coding-system 'utf-8)))

(defun fastrevert--process-file-condition (condition)
  "Return CONDITION, or `file-error' where this Emacs does not define it.
Emacs 29 and later signal `permission-denied' for EACCES, as the
module names it; older ones signal `file-error'."
  (if (get condition 'error-conditions) condition 'file-error))

(defun fastrevert--process-file-error (errno-name message file)
  "Signal the stock file error for ERRNO-NAME with MESSAGE and FILE."
  (signal (fastrevert--process-file-condition
           (pcase errno-name ('ENOENT 'file-missing) ('EACCES 'permission-denied) (_ 'file-error)))
          (list message (fastrevert--process-strerror errno-name) file)))

(defvar fastrevert--directory-cache nil
  "The last working directory worked out, as a vector.
[DEFAULT-DIRECTORY HANDLERS CODING DIR ENCODED]: the first three are
what DIR depends on (`default-directory', when it is absolute, the
file name handlers and the file name coding).  ENCODED is DIR
encoded when no file name handler applies to it, so that its check
can be native; otherwise nil.")

(defun fastrevert--process-directory ()
  "Return the child's working directory, checked, as `call-process' does.
That is `default-directory', or \"~\" when a file name handler has no
local equivalent, without a trailing slash.  Signal what stock
signals when it is not an accessible directory."
  (let* ((coding (or file-name-coding-system default-file-name-coding-system))
         (cache fastrevert--directory-cache)
         (cache (if (and cache
                         (eq (aref cache 1) file-name-handler-alist)
                         (eq (aref cache 2) coding)
                         (equal (aref cache 0) default-directory))
                    cache
                  (let* ((local (unhandled-file-name-directory default-directory))
                         (dir (fastrevert--process-unquote
                               (directory-file-name (expand-file-name (or local "~")))))
                         (entry (vector (copy-sequence default-directory)
                                        file-name-handler-alist coding dir
                                        (and (not (find-file-name-handler
                                                   dir 'file-accessible-directory-p))
                                             (fastrevert--process-encode-file dir)))))
                    ;; A relative name, or one resolved through a home
                    ;; directory, depends on more: it is not kept.
                    (when (and local (string-prefix-p "/" default-directory))
                      (setq fastrevert--directory-cache entry))
                    entry)))
         (dir (aref cache 3))
         (encoded (aref cache 4)))
    (unless (if encoded
                (fastrevert--mod-accessible-directory-p encoded)
              (file-accessible-directory-p dir))
      (fastrevert--process-file-error
       (cond ((not (file-exists-p dir)) 'ENOENT)
             ((not (file-directory-p dir)) 'ENOTDIR)
             (t 'EACCES))
       "Setting current directory" default-directory))
    dir))

;; The search of `call-process' checks, for each directory of `exec-path'
;; and each of `exec-suffixes', the expanded name with faccessat (X_OK):
;; file name handlers play no part in that check.  The candidate names
;; depend only on PROGRAM, the two variables, the handlers (through
;; `expand-file-name') and the file name coding, so they are computed once
;; per program, and each call only asks the module which one is
;; executable now.

(defvar fastrevert--program-search-key nil
  "The settings the names in `fastrevert--program-candidates' were made with.
A list (EXEC-PATH EXEC-SUFFIXES HANDLERS CODING): copies of the first
two variables, and `file-name-handler-alist' and the file name coding
system themselves.")

(defvar fastrevert--program-candidates (make-hash-table :test #'equal)
  "Program name -> the encoded file names its search tries, or `lisp'.
The names come as (VECTOR . JOINED): a vector, and the same names
each ended by a NUL byte for the module (a name with a NUL byte of
its own names no file, and is left empty there).  The value is
`lisp' for a program whose candidates cannot be kept.")

(defun fastrevert--process-compute-candidates (program)
  "Return the encoded file names searched for PROGRAM, or `lisp'.
See `fastrevert--program-candidates' for the form of the names.
`lisp' means the names depend on more than PROGRAM and the search
settings: an absolute or empty PROGRAM, an entry of the variable
`exec-path' that is not an absolute local directory name, a suffix
that is not a string, or a file name handler for any of the names."
  (let ((candidates nil)
        (suffixes (or exec-suffixes '(""))))
    (if (or (equal program "")
            (file-name-absolute-p program)
            (not (cl-every #'stringp suffixes))
            (not (cl-every (lambda (dir)
                             (and (stringp dir)
                                  (string-prefix-p "/" dir)
                                  (not (find-file-name-handler dir 'expand-file-name))))
                           exec-path)))
        'lisp
      (catch 'lisp
        (dolist (dir exec-path)
          (let ((base (expand-file-name program dir)))
            (when (find-file-name-handler base 'expand-file-name)
              (throw 'lisp 'lisp))
            (dolist (suffix suffixes)
              (push (fastrevert--process-encode-file
                     (concat (fastrevert--process-unquote base) suffix))
                    candidates))))
        (setq candidates (nreverse candidates))
        (cons (vconcat candidates)
              (mapconcat (lambda (name)
                           (concat (if (string-search "\0" name) "" name) "\0"))
                         candidates ""))))))

(defun fastrevert--process-candidates (program)
  "Return the encoded file names searched for PROGRAM, or `lisp'.
See `fastrevert--process-compute-candidates'; the result is kept until
a search setting changes."
  (let ((coding (or file-name-coding-system default-file-name-coding-system))
        (key fastrevert--program-search-key))
    (unless (and (eq (nth 2 key) file-name-handler-alist)
                 (eq (nth 3 key) coding)
                 (equal (car key) exec-path)
                 (equal (nth 1 key) exec-suffixes))
      (clrhash fastrevert--program-candidates)
      (setq fastrevert--program-search-key
            (list (copy-sequence exec-path) (copy-sequence exec-suffixes)
                  file-name-handler-alist coding)))
    (let ((candidates (gethash program fastrevert--program-candidates)))
      (unless candidates
        (setq candidates (fastrevert--process-compute-candidates program))
        (when (>= (hash-table-count fastrevert--program-candidates) 256)
          (clrhash fastrevert--program-candidates))
        (puthash program candidates fastrevert--program-candidates))
      candidates)))

(defun fastrevert--process-find-program (program)
  "Return the encoded executable file for PROGRAM, searched as `call-process' does.
The search uses the variables `exec-path' and `exec-suffixes'.  When nothing is
found, signal the error stock signals, errno included: the last
problem seen with a candidate (a directory, a file that is not
executable), or a missing file."
  (let* ((candidates (fastrevert--process-candidates program))
         (index (and (consp candidates)
                     (fastrevert--mod-first-executable (cdr candidates)))))
    (or (and index (aref (car candidates) index))
        (let ((found (locate-file program exec-path exec-suffixes 1)))
          (and found (fastrevert--process-encode-file (fastrevert--process-unquote found))))
        (let ((errno 'ENOENT))
          (dolist (dir (if (file-name-absolute-p program) '(nil) exec-path))
            (dolist (suffix (or exec-suffixes '("")))
              (let ((candidate (expand-file-name (concat program suffix) dir)))
                (cond ((fastrevert--process-name-too-long-p candidate)
                       (setq errno 'ENAMETOOLONG))
                      ((and (file-executable-p candidate)
                            (file-directory-p candidate))
                       (setq errno 'EISDIR))
                      ((file-exists-p candidate)
                       (setq errno 'EACCES))))))
          (fastrevert--process-file-error errno "Searching for program" program)))))

(defun fastrevert--process-program (program)
  "Return the encoded file to run for PROGRAM, the way `make-process' does.
A PROGRAM that starts with a slash is run as it is, unsearched: if it
cannot be run, the child says why on its standard error and exits
with 126 or 127, as a stock child does.  Any other is searched for as
`call-process' searches, and signals the same error when not found."
  (if (string-prefix-p "/" program)
      (if (file-directory-p program)
          (error "Specified program for new process is a directory")
        (fastrevert--process-encode-file program))
    (fastrevert--process-find-program program)))

(defun fastrevert--process-name-too-long-p (file)
  "Return non-nil if the system refuses FILE as too long a name.
That is ENAMETOOLONG: the encoded name fills PATH_MAX (4096 bytes), or
one of its components is longer than NAME_MAX (255 bytes)."
  (let ((encoded (fastrevert--process-encode-file (fastrevert--process-unquote file))))
    (or (>= (length encoded) 4096)
        (cl-some (lambda (component) (> (length component) 255))
                 (split-string encoded "/")))))

(defvar fastrevert--environment-cache nil
  "The last environment block made, as (COPY BLOCK . DISPLAY-SET).
COPY is a copy of the `process-environment' it was made from (the
same strings, so comparing costs little), BLOCK its entries joined by
NUL bytes, and DISPLAY-SET whether it defines DISPLAY.")

(defvar fastrevert--display-cache nil
  "The display of a frame, as (FRAME . DISPLAY), for the selected frame.
A frame's display is fixed when the frame is made, and reading the
parameter from a text terminal's frame builds all of its parameters.")

(defun fastrevert--process-environment-block ()
  "Return (BLOCK . DISPLAY-SET) for the current `process-environment'.
BLOCK holds its entries separated by NUL bytes, up to the first
element that is not a string, each entry ending at a NUL byte of
its own, as the C library sees it.  The block is kept while
`process-environment' stays equal, so that processes started in a
row share one string and make no garbage for it."
  (let ((cache fastrevert--environment-cache))
    (if (and cache (equal (car cache) process-environment))
        (cdr cache)
      (let ((entries nil)
            (display-set nil)
            (tail process-environment))
        (while (and (consp tail) (stringp (car tail)))
          (let ((entry (car tail)))
            (when (and (not display-set)
                       (or (equal entry "DISPLAY") (string-prefix-p "DISPLAY=" entry)))
              (setq display-set t))
            (push (substring entry 0 (string-search "\0" entry)) entries))
          (setq tail (cdr tail)))
        (let ((block (cons (mapconcat #'identity (nreverse entries) "\0") display-set)))
          (setq fastrevert--environment-cache
                (cons (copy-sequence process-environment) block))
          block)))))

(defvar fastrevert--environment-list-cache nil
  "The last value of `fastrevert--process-environment', as [BLOCK DIR FRAME VALUE].
It is given again, unmade, while the block, the directory string and
the selected frame are the same objects and PWD is set alike.")

(defun fastrevert--process-environment (dir)
  "Return the child's environment for working directory DIR, for the module.
The value is a list of strings, earlier ones first, each holding one
or more entries separated by NUL bytes.  Like Emacs's own environment
block: PWD follows DIR when a PWD is set, DISPLAY comes from the
frame when `process-environment' has none, and the first definition
of a name wins (the module drops later ones and lone names).  The
module only reads the value, so the same list serves a run of
children started alike."
  (let* ((block (fastrevert--process-environment-block))
         (pwd (getenv-internal "PWD"))
         (cache fastrevert--environment-list-cache))
    (if (and cache
             (eq (aref cache 0) (car block))
             (eq (aref cache 1) (and pwd dir))
             (eq (aref cache 2) (selected-frame)))
        (aref cache 3)
      (let ((value (fastrevert--process-make-environment block dir pwd)))
        (setq fastrevert--environment-list-cache
              (vector (car block) (and pwd dir) (selected-frame) value))
        value))))

(defun fastrevert--process-make-environment (block dir pwd)
  "Return the environment list for BLOCK, working directory DIR and PWD.
BLOCK is what `fastrevert--process-environment-block' returns; PWD
non-nil means `process-environment' sets PWD."
  (let ((environment (list (car block))))
    (unless (cdr block)
      (let ((display (if (eq (car fastrevert--display-cache) (selected-frame))
                         (cdr fastrevert--display-cache)
                       (cdr (setq fastrevert--display-cache
                                  (cons (selected-frame) (frame-parameter nil 'display)))))))
        (setq display (or display (getenv-internal "DISPLAY" initial-environment)))
        (when (stringp display)
          (push (concat "DISPLAY=" display) environment))))
    (when pwd
      (push (concat "PWD=" (fastrevert--process-encode-file dir)) environment))
    environment))

(defun fastrevert--process-encode-args (coding-args args)
  "Return ARGS encoded as `call-process' encodes its arguments.
CODING-ARGS are the arguments to `find-operation-coding-system'
after the operation, consulted only when an argument is
multibyte and `coding-system-for-write' is nil."
  (if (not (or coding-system-for-write (cl-some #'multibyte-string-p args)))
      args
    (let ((coding (or coding-system-for-write
                      (cdr-safe (apply #'find-operation-coding-system coding-args))
                      (cdr-safe default-process-coding-system)
                      'undecided)))
      (mapcar (lambda (arg)
                (if (multibyte-string-p arg) (encode-coding-string arg coding) arg))
              args))))

(defun fastrevert--process-raise (error-data message-by-file)
  "Signal the stock error for the native ERROR-DATA.
ERROR-DATA is (:error CONDITION FUNCTION STRERROR PATH).
MESSAGE-BY-FILE maps an encoded file name to (MESSAGE . NAME): the
stock message for a failed open of that file and the name to report."
  (pcase-let* ((`(:error ,condition ,function ,strerror ,path) error-data)
               (coding (or locale-coding-system 'utf-8))
               (text (decode-coding-string strerror coding))
               (known (assoc path message-by-file)))
    (setq condition (fastrevert--process-file-condition condition))
    (cond ((and known (equal function "open"))
           (signal condition (list (cadr known) text (cddr known))))
          ((equal function "chdir")
           (signal condition (list "Setting current directory" text
                                   default-directory)))
          (t
           (signal condition (list "Doing vfork" text))))))

;; When a program is found but cannot be executed (not a valid
;; executable, or a script whose interpreter is missing), Emacsen differ
;; by how they start children.  One that uses posix_spawn, as Emacs 30
;; does on GNU/Linux, hears of the failure and signals it ("Doing
;; vfork"); one that uses vfork, as Emacs 28 does, starts a child that
;; prints the error and exits with 126 or 127.  The module asks which
;; this Emacs does when an exec fails, and stock `call-process' answers,
;; once, for a file that is no program.
(defvar fastrevert--exec-failure-signals 'unknown
  "Whether this Emacs signals when a program it starts cannot be executed.
The symbol `unknown' until `fastrevert--process-exec-failure-signals-p'
has asked.")

(defun fastrevert--process-exec-failure-signals-p ()
  "Return non-nil if this Emacs signals when it cannot execute a program."
  (when (eq fastrevert--exec-failure-signals 'unknown)
    (let* ((default-directory temporary-file-directory)
           (file (make-temp-file "fastrevert-not-a-program")))
      (unwind-protect
          (progn
            ;; An empty file with execute permission: exec fails with
            ;; ENOEXEC, and no program runs whichever way this Emacs works.
            (set-file-modes file #o700)
            (setq fastrevert--exec-failure-signals
                  (condition-case nil
                      (progn (call-process file nil nil) nil)
                    (file-error t))))
        (delete-file file))))
  fastrevert--exec-failure-signals)

;; Emacs lowers its own soft limit on open files to FD_SETSIZE at startup
;; when it was higher, for select().  One that starts its children with
;; vfork, as Emacs 28 does, gives them back the limit it started with; one
;; that uses posix_spawn, as Emacs 30 does on GNU/Linux, gives them the
;; lowered one.  Nothing in Lisp tells the limit, so when the module sees
;; that it may have been lowered, stock `call-process' starts a shell,
;; once, to say what a child gets.
(defvar fastrevert--child-file-limit 'unknown
  "The soft limit on open files of a child that stock Emacs starts.
A number, `unlimited', nil when it could not be learnt, or the symbol
`unknown' until `fastrevert--process-child-file-limit' has asked.")

(defun fastrevert--process-child-file-limit ()
  "Return the soft limit on open files of a child started by stock Emacs.
The value is a number, `unlimited', or nil when it cannot be learnt.
It is asked of stock `call-process' once, and not while that is
rebound or advised, which could run something else."
  (when (and (eq fastrevert--child-file-limit 'unknown)
             (subrp (symbol-function 'call-process)))
    (setq fastrevert--child-file-limit
          (condition-case nil
              (with-temp-buffer
                (let ((default-directory "/")
                      (coding-system-for-read 'no-conversion))
                  (when (eql 0 (call-process "/bin/sh" nil t nil "-c" "ulimit -Sn"))
                    (goto-char (point-min))
                    (cond ((looking-at "\\([0-9]+\\)\n")
                           (string-to-number (match-string 1)))
                          ((looking-at "unlimited\n") 'unlimited)))))
            (error nil))))
  (and (not (eq fastrevert--child-file-limit 'unknown)) fastrevert--child-file-limit))

;;;; Coding systems, ids and signals

(defun fastrevert--process-coding (coding operation-args)
  "Return (DECODING . ENCODING) for a new process, as `make-process' decides.
CODING is the :coding argument; OPERATION-ARGS the arguments to
`find-operation-coding-system' after the operation.  A coding system
given by CODING, `coding-system-for-read' or `coding-system-for-write'
that does not exist signals `coding-system-error' here, as
`make-process' does, rather than when output arrives."
  (let ((decoding (if coding (if (consp coding) (car coding) coding) coding-system-for-read))
        (encoding (if coding (if (consp coding) (cdr coding) coding) coding-system-for-write)))
    (when decoding (check-coding-system decoding))
    (when encoding (check-coding-system encoding)))
  (let* ((systems 'unset)
         (lookup (lambda ()
                   (when (eq systems 'unset)
                     (setq systems (apply #'find-operation-coding-system
                                          'start-process operation-args)))
                   systems))
         (decoding (or (if coding (if (consp coding) (car coding) coding)
                         coding-system-for-read)
                       (let ((found (funcall lookup)))
                         (if (consp found) (car found)
                           (car-safe default-process-coding-system)))))
         (encoding (or (if coding (if (consp coding) (cdr coding) coding)
                         coding-system-for-write)
                       (let ((found (funcall lookup)))
                         (if (consp found) (cdr found)
                           (cdr-safe default-process-coding-system))))))
    (cons (or decoding 'undecided) (or encoding 'undecided))))

(defvar fastrevert--process-last-id 0
  "The last id given to an engine process.")

(defun fastrevert--process-new-id ()
  "Return a fresh engine process id."
  (setq fastrevert--process-last-id (1+ fastrevert--process-last-id)))

(defun fastrevert--signal-number (sigcode)
  "Return the number of the signal SIGCODE, read as `signal-process' does.
A name may also be a string."
  (cond ((integerp sigcode)
         (if (<= -2147483648 sigcode 2147483647)
             sigcode
           (signal 'args-out-of-range (list sigcode -2147483648 2147483647))))
        ((or (symbolp sigcode) (stringp sigcode))
         (or (fastrevert--mod-signal-number
              (if (symbolp sigcode) (symbol-name sigcode) sigcode))
             (error "Undefined signal name %s" sigcode)))
        (t (signal 'wrong-type-argument (list 'integerp sigcode)))))

(provide 'fastrevert-child)

;;; fastrevert-child.el ends here
