;;; fastrevert-process.el --- Native process output for fastrevert -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; Keywords: processes

;;; Commentary:

;; Two drop-ins that move the reading of subprocess output into native
;; code:
;;
;; - `fastrevert-call-process' takes the arguments of `call-process'
;;   and returns what it returns.  The child's output goes through a
;;   pipe into a memfd (an anonymous in-memory file) while Emacs waits
;;   natively; Emacs then inserts the whole output with one
;;   `insert-file-contents', which decodes it straight into the buffer
;;   gap.  Nothing is decoded per chunk and no Lisp string is made.
;;
;; - `fastrevert-make-process' takes the keywords of `make-process'
;;   (plus :framing) and returns a `fastrevert-process'.  The engine
;;   thread reads the child's output and hands it to Emacs in coalesced
;;   batches: a filter is called once per stream per wake-up, however
;;   many small writes the child made.  With :framing `lines' a filter
;;   only ever sees complete lines, and with `lsp' only complete
;;   Content-Length messages.  Output for a buffer (no filter) takes
;;   the road `fastrevert-call-process' takes: the engine appends it
;;   to a memfd, and Emacs inserts each new range with
;;   `insert-file-contents' at the process mark, so no Lisp string is
;;   made for it.
;;
;; All policy (which coding system, which buffer, which error to
;; signal) is here and follows the stock primitives; the native side
;; spawns, waits and reads.

;;; Code:

(require 'cl-lib)
(require 'fastrevert)

(declare-function fastrevert--mod-call-process "fastrevert-module"
                  (program argv env cwd infile stdout stderr chunk))
(declare-function fastrevert--mod-close-fd "fastrevert-module" (fd))
(declare-function fastrevert--mod-memfd-release "fastrevert-module" (fd end close))
(declare-function fastrevert--mod-memfd-read "fastrevert-module" (fd beg end))
(declare-function fastrevert--mod-accessible-directory-p "fastrevert-module" (directory))
(declare-function fastrevert--mod-process-start "fastrevert-module"
                  (id program argv env cwd stdin stdout stderr framing read-size))
(declare-function fastrevert--mod-process-send "fastrevert-module" (id string))
(declare-function fastrevert--mod-process-eof "fastrevert-module" (id))
(declare-function fastrevert--mod-process-signal "fastrevert-module" (id signal))
(declare-function fastrevert--mod-process-remove "fastrevert-module" (id))
(declare-function fastrevert--mod-signal-number "fastrevert-module" (name))
(declare-function fastrevert--mod-strsignal "fastrevert-module" (signal))
(declare-function fastrevert--mod-strerror "fastrevert-module" (name))
(declare-function fastrevert--mod-first-executable "fastrevert-module" (candidates))
(declare-function fastrevert--mod-wait "fastrevert-module" (seconds))
(declare-function fastrevert--mod-hold-wakes "fastrevert-module" (hold))

(defvar format-alist)

;;;; Shared by both primitives

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

(defun fastrevert--process-environment (dir)
  "Return the child's environment for working directory DIR, for the module.
The value is a list of strings, earlier ones first, each holding one
or more entries separated by NUL bytes.  Like Emacs's own environment
block: PWD follows DIR when a PWD is set, DISPLAY comes from the
frame when `process-environment' has none, and the first definition
of a name wins (the module drops later ones and lone names)."
  (let* ((block (fastrevert--process-environment-block))
         (environment (list (car block))))
    (unless (cdr block)
      (let ((display (if (eq (car fastrevert--display-cache) (selected-frame))
                         (cdr fastrevert--display-cache)
                       (cdr (setq fastrevert--display-cache
                                  (cons (selected-frame) (frame-parameter nil 'display)))))))
        (setq display (or display (getenv-internal "DISPLAY" initial-environment)))
        (when (stringp display)
          (push (concat "DISPLAY=" display) environment))))
    (when (getenv-internal "PWD")
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

;;;; fastrevert-call-process

(defun fastrevert--call-process-coding (coding-args)
  "Return the coding system for output, as `call-process' chooses it.
CODING-ARGS are the arguments to `find-operation-coding-system'
after the operation.  Nil stands for `undecided'."
  (or coding-system-for-read
      (let ((systems (apply #'find-operation-coding-system coding-args)))
        (cond ((consp systems) (car systems))
              ((consp default-process-coding-system)
               (car default-process-coding-system))))))

(defun fastrevert--raw-text-coding (coding)
  "Return the `raw-text' variant of CODING, as `call-process' picks it.
A coding system of type `raw-text' (`no-conversion' included) is
its own variant; any other gets `raw-text' with its end-of-line
conversion."
  (if (eq (coding-system-type coding) 'raw-text)
      coding
    (let ((eol (coding-system-eol-type coding)))
      (if (vectorp eol)
          'raw-text
        (aref [raw-text-unix raw-text-dos raw-text-mac] eol)))))

(defconst fastrevert--call-process-chunk (* 2 1024 1024)
  "Bytes of output to gather before inserting while the child still runs.
Inserting in such chunks lets Emacs decode while the child writes.")

(defun fastrevert--call-process-streamable-p (coding)
  "Return non-nil if output in CODING may be inserted in newline-ended chunks.
That holds for ASCII-compatible coding systems that keep no state
across lines and need no detection of the character encoding;
`undecided' is detected once, on the whole output."
  (and coding
       (memq (coding-system-type coding) '(utf-8 charset raw-text shift-jis big5))))

(defun fastrevert--call-process-inserter (coding)
  "Return a function inserting the output at point, decoded with CODING.
The function is called as (FD BEG END), for consecutive byte ranges
of the memfd FD, or as (BYTES nil nil) with all of a short output as
a unibyte string, or as (nil nil nil) when there was no output.  It
leaves point after the text, as `call-process' does, and changes
only what `call-process' itself changes: `buffer-file-coding-system',
which `insert-file-contents' would set, is restored, and no file
name handler, format decoder or after-insert function runs.  A
coding system with parts left to detect is fixed to what the first
range detected, as `call-process' fixes it after its first read."
  (lambda (fd beg end)
    (let ((decoding (if (and coding (not enable-multibyte-characters))
                        (fastrevert--raw-text-coding coding)
                      (or coding 'undecided))))
      (cond
       ((not fd)
        ;; No output: `call-process' still reports the coding system it
        ;; set up.
        (setq last-coding-system-used decoding))
       ((stringp fd)
        (insert (decode-coding-string fd decoding t))
        (setq coding last-coding-system-used))
       (t
        (let ((saved-file-coding buffer-file-coding-system)
              (start (point)))
          (let* ((coding-system-for-read decoding)
                 (file-name-handler-alist nil)
                 (after-insert-file-functions nil)
                 (format-alist nil)
                 (inserted (cadr (insert-file-contents (format "/proc/self/fd/%d" fd)
                                                       nil beg end))))
            (goto-char (+ start inserted)))
          (setq coding last-coding-system-used)
          (unless (eq buffer-file-coding-system saved-file-coding)
            (setq buffer-file-coding-system saved-file-coding))))))))

(defun fastrevert--call-process-destination (destination)
  "Parse DESTINATION as `call-process' does.
Return (BUFFER OUTPUT-FILE STDERR) where BUFFER is nil, 0 or a live
buffer, OUTPUT-FILE an expanded file name or nil, and STDERR t,
nil or an expanded file name.  Buffers named by string are created."
  (let ((buffer destination)
        (stderr t)
        (output-file nil))
    (when (and (consp buffer) (not (eq (car buffer) :file)))
      (when (consp (cdr buffer))
        (let ((file (cadr buffer)))
          (setq stderr (if (memq file '(nil t)) file (expand-file-name file)))))
      (setq buffer (car buffer)))
    (when (and (consp buffer) (eq (car buffer) :file))
      (let ((file (if (consp (cdr buffer)) (cadr buffer) (cdr buffer))))
        (unless (stringp file) (signal 'wrong-type-argument (list 'stringp file)))
        (setq output-file (expand-file-name file)
              buffer nil)))
    (cond ((eq buffer t) (setq buffer (current-buffer)))
          ((or (null buffer) (integerp buffer)))
          (t (let ((spec buffer))
               (setq buffer (get-buffer-create buffer))
               (unless buffer (signal 'wrong-type-argument (list 'bufferp spec))))))
    (list buffer output-file stderr)))

;;;###autoload
(defun fastrevert-call-process (program &optional infile destination display &rest args)
  "Call PROGRAM synchronously in a separate process, natively.
A drop-in for `call-process': the arguments, the DESTINATION forms
and the return value are the same.  INFILE is the file to read the
input from (nil means the null device).  DESTINATION is t (the
current buffer), nil (discard), 0 (discard and do not wait), a buffer
or buffer name, (:file FILE), or (REAL-DESTINATION STDERR-FILE) with
STDERR-FILE nil (discard), t (mixed with the output) or a file name.
DISPLAY non-nil means redisplay as output is inserted: the output is
then inserted line by line as it arrives (in a coding system that
needs no detection; otherwise at the end).  ARGS are the program's
arguments.

The output is decoded with `coding-system-for-read', or else what
`process-coding-system-alist' or `default-process-coding-system'
give for `call-process'.  The child runs in `default-directory' with
`process-environment'.  A remote `default-directory' delegates to
`process-file'.  Quitting kills the child (SIGINT, then SIGKILL)
and signals `quit'.

Return the exit status, or a string describing the signal that
killed the program, or nil when DESTINATION is 0."
  (if (and (stringp default-directory)
           (find-file-name-handler default-directory 'process-file))
      (apply #'process-file program infile destination display args)
    (fastrevert--call-process-local program infile destination display args)))

(defun fastrevert--call-process-local (program infile destination display args)
  "Run PROGRAM with INFILE, DESTINATION, DISPLAY and ARGS, all local.
This is `fastrevert-call-process' once a file name handler is ruled out."
  ;; Stock call-process opens INFILE before it checks anything else.
  (let* ((infile (and infile (fastrevert--process-unquote
                              (expand-file-name infile (fastrevert--process-input-directory))))))
    (unless (stringp program) (signal 'wrong-type-argument (list 'stringp program)))
    (dolist (arg args)
      (unless (stringp arg) (signal 'wrong-type-argument (list 'stringp arg))))
    (when infile (fastrevert--process-check-readable infile))
    (pcase-let* ((coding-args (append (list 'call-process program infile destination display)
                                      args))
                 (`(,buffer ,output-file ,stderr) (fastrevert--call-process-destination
                                                   destination))
                 (dir (fastrevert--process-directory))
                 (encoded-path (fastrevert--process-find-program program))
                 (encoded-args (fastrevert--process-encode-args coding-args args))
                 (argv (vconcat (list encoded-path) encoded-args))
                 (env (fastrevert--process-environment dir))
                 (encoded-dir (fastrevert--process-encode-file dir))
                 (encoded-infile (and infile (fastrevert--process-encode-file infile)))
                 (encoded-output (and output-file (fastrevert--process-encode-file output-file)))
                 (encoded-stderr (if (stringp stderr) (fastrevert--process-encode-file stderr) stderr))
                 (files (list (cons encoded-infile (cons "Opening process input file" infile))
                              (cons encoded-output (cons "Opening process output file" output-file))
                              (cons encoded-stderr (cons "Cannot redirect stderr" stderr)))))
      (if (integerp buffer)
          (fastrevert--call-process-detached encoded-path argv env encoded-dir encoded-infile
                                             encoded-stderr files)
        (let* ((coding (and buffer (fastrevert--call-process-coding coding-args)))
               (inserted nil)
               (insert (and buffer (fastrevert--call-process-inserter coding)))
               (stdout (cond (buffer
                              (lambda (fd beg end)
                                (setq inserted t)
                                (with-current-buffer buffer
                                  (funcall insert fd beg end))
                                (when display (redisplay))))
                             (encoded-output encoded-output)))
               ;; Standard error "mixed with the output" goes to the null
               ;; device when the output is discarded.
               (stderr-target (if (and (eq encoded-stderr t) (null stdout)) nil encoded-stderr))
               (result (fastrevert--mod-call-process
                        encoded-path argv env encoded-dir encoded-infile stdout stderr-target
                        (cond ((not (fastrevert--call-process-streamable-p coding)) 0)
                              ;; Shown as it comes: every complete line.
                              (display 1)
                              (t fastrevert--call-process-chunk)))))
          (when (eq (car result) :error)
            (fastrevert--process-raise result files))
          (when (and buffer (not inserted))
            (with-current-buffer buffer (funcall insert nil nil nil)))
          (pcase-let ((`(,kind ,value ,_core) result))
            (if (eq kind 'signal)
                (decode-coding-string value (or locale-coding-system 'utf-8))
              value)))))))

(defun fastrevert--process-input-directory ()
  "Return the directory INFILE is expanded against, as stock does."
  (or (unhandled-file-name-directory default-directory) "~"))

(defun fastrevert--process-check-readable (file)
  "Signal what `call-process' signals when it cannot open FILE for input."
  (unless (file-readable-p file)
    (fastrevert--process-file-error
     (cond ((not (file-exists-p file)) 'ENOENT)
           (t 'EACCES))
     "Opening process input file" file)))

(defun fastrevert--call-process-detached (path argv env dir infile stderr files)
  "Start PATH with ARGV, ENV, DIR, INFILE and STDERR, and do not wait.
The engine reaps the child when it exits.  FILES maps the encoded
names to the stock messages.  Return nil, as `call-process' does
for DESTINATION 0."
  (fastrevert--engine-ensure)
  (let* ((id (fastrevert--process-new-id))
         (result (fastrevert--mod-process-start
                  id path argv env dir infile nil (if (stringp stderr) stderr nil) nil 4096)))
    (when (eq (car-safe result) :error)
      (fastrevert--process-raise result files))
    nil))

;;;; fastrevert-make-process: the process object

(cl-defstruct (fastrevert-process
               (:constructor fastrevert--process-create)
               ;; Positional, for `fastrevert-make-process': keyword
               ;; arguments would cost a list and a search per call.
               (:constructor fastrevert--process-start-record
                             (id name command buffer mark stderr-buffer stderr-mark
                                 filter sentinel decoding encoding query-on-exit engine))
               (:conc-name fastrevert--process-)
               (:predicate fastrevert-process-p)
               (:copier nil))
  "A child process run by fastrevert's engine.
Use the `fastrevert-process-*' functions rather than the slots."
  (id nil :documentation "The engine's id for the process.")
  (name nil :documentation "The process name, unique among fastrevert processes.")
  (command nil :documentation "The command line, a list of strings.")
  (pid nil :documentation "The process id of the child.")
  (buffer nil :documentation "The buffer output goes to, or nil.")
  (mark nil :documentation "The process mark in BUFFER.")
  (stderr-buffer nil :documentation "The buffer for standard error, or nil.")
  (stderr-mark nil :documentation "The mark in STDERR-BUFFER.")
  (filter nil :documentation "The filter function, or nil.")
  (sentinel nil :documentation "The sentinel function, or nil.")
  (decoding nil :documentation "The coding system that decodes output.")
  (encoding nil :documentation "The coding system that encodes input.")
  (tails nil :documentation "Undecoded bytes per stream, as (STREAM . BYTES).")
  (states nil :documentation "Per stream, as (STREAM . STATE): the ISO 2022 state
at the end of what was decoded, for a stateful ISO 2022 coding.")
  (memfd nil :documentation "The memfd that receives stdout, or nil.
For a process with a buffer and no filter, the engine makes one once
the output is no longer small, and hands it over: its standard output
is then inserted from there, by ranges.")
  (memfd-consumed 0 :documentation "How many bytes of MEMFD were delivered.")
  (memfd-released 0 :documentation "How many bytes of MEMFD gave their memory back.")
  (memfd-end 0 :documentation "How many bytes the engine has written to MEMFD.")
  (memfd-tail "" :documentation "The last bytes written to MEMFD (up to 4).")
  (status 'run :documentation "One of `run', `exit' or `signal'.")
  (exit-status 0 :documentation "The exit code or signal number.")
  (core-dumped nil :documentation "Non-nil if the child dumped core.")
  (query-on-exit t :documentation "Non-nil to ask before Emacs kills it.")
  (outputs 0 :documentation "Counts batches of output as they are delivered.
It also moves when output arrives that must wait (see QUEUE), so
that a wait for output sees it has come.")
  (plist nil :documentation "A property list for the caller.")
  (engine nil :documentation "The `fastrevert--engine-generation' this started in.
A restarted engine has forgotten the process (stopping it killed the
child), which this tells apart.")
  (busy nil :documentation "Non-nil while the process's output or end is handled.")
  (queue nil :documentation "Results of the process that wait for BUSY to clear.
A list of (HANDLER CODE DATA), oldest first."))

(cl-defmethod cl-print-object ((process fastrevert-process) stream)
  "Print PROCESS to STREAM by name, as Emacs prints a process."
  (princ (format "#<fastrevert-process %s>" (fastrevert--process-name process)) stream))

(defvar fastrevert--process-last-id 0
  "The last id given to an engine process.")

(defvar fastrevert--processes (make-hash-table :test #'eql)
  "Live fastrevert processes by engine id.")

(defvar fastrevert--process-output-count 0
  "How many batches of process output have been delivered, in total.")

(defun fastrevert--process-new-id ()
  "Return a fresh engine process id."
  (setq fastrevert--process-last-id (1+ fastrevert--process-last-id)))

(defvar fastrevert--process-names (make-hash-table :test #'equal)
  "Name -> the fastrevert process of that name in `fastrevert--processes'.")

(defun fastrevert--process-unique-name (name)
  "Return NAME, or NAME<N> if a fastrevert process has that name.
N counts from 1, as `make-process' numbers its processes."
  (let ((candidate name)
        (n 0))
    (while (gethash candidate fastrevert--process-names)
      (setq n (1+ n)
            candidate (format "%s<%d>" name n)))
    candidate))

(defun fastrevert--process-forget (process)
  "Remove PROCESS from the tables of live fastrevert processes."
  (remhash (fastrevert--process-id process) fastrevert--processes)
  (let ((name (fastrevert--process-name process)))
    (when (eq (gethash name fastrevert--process-names) process)
      (remhash name fastrevert--process-names))))

(defun fastrevert--process-check (process)
  "Signal `wrong-type-argument' unless PROCESS is a `fastrevert-process'."
  (unless (fastrevert-process-p process)
    (signal 'wrong-type-argument (list 'fastrevert-process-p process))))

;;;; Decoding output

(defvar fastrevert--split-kinds (make-hash-table :test #'eq)
  "Coding system -> its `fastrevert--process-split-kind', once computed.")

(defun fastrevert--process-split-kind (coding)
  "Return how output in CODING is cut between batches without harm.
`utf-8': the last bytes tell whether a character is unfinished (the
UTF-8 family, and `undecided' until it has detected something).
`single': every character is one byte; only a carriage return waits.
`utf-16': two-byte units, with surrogate pairs.
`iso-2022': a stateful 7-bit ISO 2022 coding, whose designations and
shifts must carry over to the next batch.
`decoded': any other; an unfinished character at the end decodes to
raw bytes, which wait for the rest."
  (or (gethash coding fastrevert--split-kinds)
      (puthash
       coding
       (let ((type (coding-system-type coding))
             (flags (coding-system-get coding :flags))
             (charsets (coding-system-get coding :charset-list)))
         (cond ((memq type '(utf-8 undecided prefer-utf-8)) 'utf-8)
               ((eq type 'raw-text) 'single)
               ((eq type 'utf-16) 'utf-16)
               ((and (eq type 'iso-2022)
                     (or (memq 'designation flags) (memq 'locking-shift flags)))
                'iso-2022)
               ((and (eq type 'charset) (consp charsets)
                     (cl-every (lambda (charset) (= (charset-dimension charset) 1)) charsets))
                'single)
               (t 'decoded)))
       fastrevert--split-kinds)))

(defun fastrevert--utf-8-incomplete-tail (bytes)
  "Return how many bytes at the end of BYTES begin an unfinished character.
BYTES is a unibyte string of UTF-8."
  (let* ((len (length bytes))
         (i (1- len))
         (limit (max 0 (- len 4))))
    ;; Step back over continuation bytes to the byte that leads them.
    (while (and (>= i limit) (= (logand (aref bytes i) #xC0) #x80))
      (setq i (1- i)))
    (if (< i limit)
        0
      (let* ((lead (aref bytes i))
             (needed (cond ((< lead #xC2) 1)
                           ((< lead #xE0) 2)
                           ((< lead #xF0) 3)
                           ((< lead #xF5) 4)
                           (t 1)))
             (have (- len i)))
        (if (< have needed) have 0)))))

(defun fastrevert--utf-16-incomplete-tail (coding bytes)
  "Return how many bytes at the end of BYTES, in the UTF-16 CODING, must wait.
An odd byte, and a leading surrogate whose partner has not come."
  (let* ((len (length bytes))
         (odd (% len 2))
         (whole (- len odd)))
    (if (< whole 2)
        odd
      (let* ((big (fastrevert--utf-16-big-endian-p coding bytes))
             (high (aref bytes (if big (- whole 2) (1- whole)))))
        (if (= (logand high #xFC) #xD8) (+ odd 2) odd)))))

(defun fastrevert--utf-16-big-endian-p (coding bytes)
  "Return non-nil if BYTES, output in the UTF-16 CODING, are big-endian.
A coding system that detects the byte order takes it from a byte
order mark at the start of BYTES."
  (let ((bom (coding-system-get coding :bom)))
    (if (and (consp bom) (>= (length bytes) 2))
        (not (and (eq (aref bytes 0) #xFF) (eq (aref bytes 1) #xFE)))
      (not (eq (coding-system-get coding :endian) 'little)))))

(defun fastrevert--process-held-back (coding bytes)
  "Return how many bytes at the end of BYTES must wait for more output.
These are the start of a character that CODING cannot decode yet,
and a carriage return that may begin a CRLF under a DOS coding.
For the `decoded' and `iso-2022' kinds of
`fastrevert--process-split-kind' that needs decoding, and 0 is returned
here."
  (let* ((kind (fastrevert--process-split-kind coding))
         (held (pcase kind
                 ('utf-8 (fastrevert--utf-8-incomplete-tail bytes))
                 ('utf-16 (fastrevert--utf-16-incomplete-tail coding bytes))
                 (_ 0)))
         (len (length bytes))
         (cr (if (eq kind 'utf-16) 2 1)))
    (if (and (memq kind '(utf-8 single utf-16))
             (> (- len held) (1- cr))
             (eql (coding-system-eol-type coding) 1)
             (let ((at (- len held cr)))
               (if (eq kind 'utf-16)
                   (let ((big (fastrevert--utf-16-big-endian-p coding bytes)))
                     (and (eql (aref bytes (if big at (1+ at))) 0)
                          (eql (aref bytes (if big (1+ at) at)) ?\r)))
                 (eql (aref bytes at) ?\r))))
        (+ held cr)
      held)))

(defconst fastrevert--iso-2022-sequence
  "\e\\(?:\\$?[(-/]\\|\\$\\)[0-~]\\|[\016\017]"
  "A designation or a locking shift of ISO 2022.")

(defun fastrevert--iso-2022-scan (state bytes)
  "Return STATE updated by the designations and shifts in BYTES.
STATE is a vector [G0 G1 G2 G3 SHIFTED]: the escape sequence last
designating each graphic set, and whether SO is in effect.  The value
is (NEW-STATE . END), END being where the last sequence in BYTES ends
\(0 when there is none)."
  (let ((state (copy-sequence state))
        (start 0))
    (while (string-match fastrevert--iso-2022-sequence bytes start)
      (let ((sequence (match-string 0 bytes)))
        (setq start (match-end 0))
        (cond ((equal sequence "\016") (aset state 4 t))
              ((equal sequence "\017") (aset state 4 nil))
              (t
               ;; ESC I F, ESC $ I F, or ESC $ F for a two-byte set in G0.
               (let ((intermediate (cond ((not (eq (aref sequence 1) ?$)) (aref sequence 1))
                                         ((= (length sequence) 4) (aref sequence 2)))))
                 (aset state (if intermediate (% (- intermediate ?\() 4) 0) sequence))))))
    (cons state start)))

(defun fastrevert--iso-2022-prefix (state)
  "Return the escape sequences that put a decoder in STATE."
  (concat (aref state 0) (aref state 1) (aref state 2) (aref state 3)
          (if (aref state 4) "\016" "")))

(defun fastrevert--iso-2022-cut (state bytes)
  "Return (HELD . NEW-STATE) for BYTES of output in ISO 2022 STATE.
STATE is the state at the start of BYTES; HELD is how many bytes at
their end must wait, and NEW-STATE the state after the others.  An
escape sequence not finished yet waits (a single shift with the
character it shifts), and so does the first byte of a two-byte
character when the set in use has two-byte characters."
  (let* ((len (length bytes))
         (escape (let ((at (max 0 (- len 4))) (found nil))
                   (while (< at len)
                     (when (eq (aref bytes at) ?\e) (setq found at))
                     (setq at (1+ at)))
                   found))
         (unfinished (and escape
                          (let ((tail (substring bytes escape)))
                            (or (not (string-match "\\`\e\\(?:\\$?[(-/]\\|\\$\\)?[0-~]" tail))
                                (string-match "\\`\e[NO]\\'" tail))))))
    (if unfinished
        (cons (- len escape) (car (fastrevert--iso-2022-scan state (substring bytes 0 escape))))
      ;; The graphic bytes after the last designation or shift, and after
      ;; the last control character, pair up when the set in use is a
      ;; two-byte one.  No sequence follows them, so the state after all of
      ;; BYTES is the state they are in.
      (let* ((scan (fastrevert--iso-2022-scan state bytes))
             (state (car scan))
             (after (let ((at (1- len)))
                      (while (and (>= at (cdr scan)) (<= #x21 (aref bytes at) #x7E))
                        (setq at (1- at)))
                      (1+ at)))
             (in-use (aref state (if (aref state 4) 1 0))))
        (cons (if (and in-use (eq (aref in-use 1) ?$) (cl-oddp (- len after))) 1 0)
              state)))))

(defun fastrevert--process-decode (process stream data eof)
  "Return DATA, output of PROCESS on STREAM, decoded.
Bytes that end in the middle of a character are kept for the next
batch, unless EOF; the coding system is then fixed to the one
`undecided' detected, as Emacs does for a process.  For a stateful
ISO 2022 coding, the designations and shifts in effect carry over."
  (let* ((cell (assq stream (fastrevert--process-tails process)))
         (all (if (and cell (> (length (cdr cell)) 0)) (concat (cdr cell) data) data))
         (coding (fastrevert--process-decoding process))
         (kind (fastrevert--process-split-kind coding))
         (state-cell (and (eq kind 'iso-2022) (assq stream (fastrevert--process-states process))))
         (state (if state-cell (cdr state-cell) (make-vector 5 nil)))
         (cut (and (eq kind 'iso-2022) (not eof) (fastrevert--iso-2022-cut state all)))
         (held (cond (eof 0)
                     (cut (car cut))
                     (t (fastrevert--process-held-back coding all))))
         (bytes (if (> held 0) (substring all 0 (- held)) all))
         (text nil))
    (cond
     ((eq kind 'iso-2022)
      (setq text (decode-coding-string (concat (fastrevert--iso-2022-prefix state) bytes)
                                       coding t))
      ;; At the end of output no state is needed any more.
      (when cut
        (if state-cell
            (setcdr state-cell (cdr cut))
          (push (cons stream (cdr cut)) (fastrevert--process-states process)))))
     ((and (eq (coding-system-type coding) 'raw-text)
           (eql (coding-system-eol-type coding) 0))
      (setq text bytes))
     (t
      (setq text (decode-coding-string bytes coding t))
      (when (and (eq kind 'decoded) (not eof))
        ;; An unfinished character decodes to raw bytes at the end, one
        ;; per byte: they wait, with a carriage return before them under
        ;; a DOS coding.
        (let ((len (length text))
              (raw 0))
          (while (and (< raw (min 3 len))
                      (eq (char-charset (aref text (- len raw 1))) 'eight-bit))
            (setq raw (1+ raw)))
          (when (and (< raw len)
                     (eql (coding-system-eol-type coding) 1)
                     (eql (aref text (- len raw 1)) ?\r))
            (setq raw (1+ raw)))
          (when (> raw 0)
            (setq text (substring text 0 (- raw))
                  held raw))))))
    (let ((kept (and (> held 0) (substring all (- held)))))
      (if cell
          (setcdr cell kept)
        (when kept
          (push (cons stream kept) (fastrevert--process-tails process)))))
    (unless (eq (coding-system-type coding) 'raw-text)
      (when (and last-coding-system-used
                 (not (eq last-coding-system-used coding)))
        (setf (fastrevert--process-decoding process)
              (fastrevert--process-continuing-coding last-coding-system-used))))
    text))

(defun fastrevert--process-continuing-coding (coding)
  "Return the coding system that decodes the output after a first batch in CODING.
A UTF-16 coding that looks for a byte order mark looks only at the
start of the output; the rest is read with the byte order found."
  (if (and (eq (coding-system-type coding) 'utf-16)
           (coding-system-get coding :bom))
      (let ((eol (coding-system-eol-type coding))
            (base (if (eq (coding-system-get coding :endian) 'little) 'utf-16le 'utf-16be)))
        (if (integerp eol)
            (coding-system-change-eol-conversion base (aref [unix dos mac] eol))
          base))
    coding))

;;;; Delivering output

(defun fastrevert--process-insert (process buffer mark text &optional detected)
  "Insert TEXT from PROCESS into BUFFER at MARK, as the default filter does.
Point follows when it was at the mark, markers at the mark (window
points included) are pushed after the text, and read-only status
and narrowing are respected as `internal-default-process-filter'
does.  TEXT is a string, or a function that inserts the text at
point as `insert-before-markers' would and leaves point after it.
DETECTED non-nil says that decoding TEXT detected the coding
system; into a multibyte buffer, Emacs's native default filter
\(`fast-read-process-output') then leaves markers at the mark
before the text, and so does this function.  (A unibyte buffer
takes its output undecoded there, and detects nothing.)"
  (ignore process)
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (let* ((opoint (point))
             (old-begv (point-min))
             (old-zv (point-max))
             (old-read-only buffer-read-only)
             ;; A unibyte TEXT needs no conversion for a multibyte
             ;; buffer: `insert' turns its bytes into the same characters
             ;; `string-to-multibyte' would, without a copy.
             (text (if (and (stringp text) (not enable-multibyte-characters)
                            (multibyte-string-p text))
                       ;; What the default filter does, obsolete or not.
                       (with-no-warnings (string-as-unibyte text))
                     text))
             before)
        (setq buffer-read-only nil)
        (unwind-protect
            (progn
              (goto-char (if (marker-buffer mark) mark (point-max)))
              (setq before (point))
              (cond ((functionp text) (funcall text))
                    ((and detected enable-multibyte-characters
                          (bound-and-true-p fast-read-process-output))
                     (insert text))
                    (t (insert-before-markers text)))
              (set-marker mark (point))
              (let ((delta (- (point) before)))
                (when (>= opoint before) (setq opoint (+ opoint delta)))
                (when (> old-begv before) (setq old-begv (+ old-begv delta)))
                (when (>= old-zv before) (setq old-zv (+ old-zv delta))))
              (unless (and (= old-begv (point-min)) (= old-zv (point-max)))
                (narrow-to-region old-begv old-zv)))
          (setq buffer-read-only old-read-only)
          (goto-char opoint))))))

(defun fastrevert--process-call (kind function &rest args)
  "Call FUNCTION with ARGS as a process KIND, in the stock manner.
KIND is \"filter\" or \"sentinel\".
An error is reported rather than propagated, unless `debug-on-error'
asks for the debugger, and the match data are preserved."
  (save-match-data
    (condition-case-unless-debug err
        (apply function args)
      (error (message "error in process %s: %s" kind (error-message-string err))))))

(defun fastrevert--process-count-output (process)
  "Count one batch of output of PROCESS as delivered."
  (setf (fastrevert--process-outputs process) (1+ (fastrevert--process-outputs process)))
  (setq fastrevert--process-output-count (1+ fastrevert--process-output-count)))

(defun fastrevert--process-deliver (process stream text &optional detected)
  "Deliver TEXT, output of PROCESS on STREAM (1 or 2), to its consumer.
DETECTED is as for `fastrevert--process-insert'."
  (unless (equal text "")
    (fastrevert--process-count-output process)
    (if (eql stream 2)
        (fastrevert--process-insert process (fastrevert--process-stderr-buffer process)
                                    (fastrevert--process-stderr-mark process) text detected)
      (let ((filter (fastrevert--process-filter process)))
        (if filter
            (fastrevert--process-call
             "filter" filter process
             ;; Decoding ASCII gives back the unibyte bytes; a stock
             ;; filter gets a multibyte string from any coding system
             ;; but the raw-text family.
             (if (or (multibyte-string-p text)
                     (eq (coding-system-type (fastrevert--process-decoding process)) 'raw-text))
                 text
               (string-to-multibyte text)))
          (fastrevert--process-insert process (fastrevert--process-buffer process)
                                      (fastrevert--process-mark process) text detected))))))

(defun fastrevert--process-detection-moves-markers-p (coding)
  "Non-nil when detecting CODING's coding system would change where markers go.
That is while CODING is still to be detected (`undecided', or a byte
order mark to look for) and Emacs's native default filter is on; see
`fastrevert--process-insert'."
  (and (bound-and-true-p fast-read-process-output)
       (or (eq (coding-system-type coding) 'undecided)
           (consp (coding-system-get coding :bom)))))

(defun fastrevert--process-decode-and-deliver (process stream data eof)
  "Decode DATA, output of PROCESS on STREAM, and deliver it.
EOF is as for `fastrevert--process-decode'."
  (let* ((coding (fastrevert--process-decoding process))
         (text (fastrevert--process-decode process stream data eof)))
    (fastrevert--process-deliver
     process stream text
     ;; Detection settles a coding system of another kind; finding only
     ;; the end-of-line convention keeps the kind.
     (not (eq (coding-system-base coding)
              (coding-system-base (fastrevert--process-decoding process)))))))

(defun fastrevert--on-process-output (id code data)
  "Handle output DATA of engine process ID on stream CODE.
See `fastrevert--process-output' for the codes."
  (let ((process (gethash id fastrevert--processes)))
    (cond (process
           (fastrevert--process-receive process #'fastrevert--process-output code data))
          ((eql code 4)
           ;; A memfd for a process already forgotten.
           (fastrevert--mod-close-fd (string-to-number data))))))

(defun fastrevert--process-output (process code data)
  "Handle output DATA of PROCESS on stream CODE.
CODE 4 hands over the process's memfd: DATA is the number of a
descriptor of it, which is then the process's to close.  CODE 3 means
DATA tells how far the engine has written that memfd (see
`fastrevert--process-memfd-ready')."
  (let ((live (eq (gethash (fastrevert--process-id process) fastrevert--processes) process)))
    (cond
     ((eql code 4)
      (let ((fd (string-to-number data)))
        (if live
            (setf (fastrevert--process-memfd process) fd)
          (fastrevert--mod-close-fd fd))))
     ((not live))
     ((eql code 3)
      (fastrevert--process-memfd-ready process data))
     (t
      (when (and (eql code 1) (fastrevert--process-memfd process))
        ;; The engine could not write the memfd and passes the rest as
        ;; strings: what it wrote and Emacs has not delivered comes first.
        (fastrevert--process-memfd-to-tail process))
      (fastrevert--process-decode-and-deliver process code data nil)))))

(defun fastrevert--process-receive (process handler code data)
  "Call HANDLER on CODE and DATA of PROCESS, in turn.
HANDLER is called as (HANDLER PROCESS CODE DATA).  A process's
results are handled one at a time and in the order the engine sent
them: one that arrives while another is being handled (a filter
waiting for more output drains the engine again) waits in the
process's queue, and is handled as soon as the one before returns.
So a filter is never called while it runs, as with stock Emacs, and
no output overtakes the output before it."
  (if (or (fastrevert--process-busy process) (fastrevert--process-queue process))
      (progn
        (setf (fastrevert--process-queue process)
              (nconc (fastrevert--process-queue process) (list (list handler code data))))
        ;; A wait for this process's output must see that it has come.
        (fastrevert--process-count-output process)
        (unless (fastrevert--process-busy process)
          (fastrevert--process-run-queue process)))
    (setf (fastrevert--process-busy process) t)
    (unwind-protect
        (progn
          (funcall handler process code data)
          (fastrevert--process-run-queue process))
      (fastrevert--process-done-handling process))))

(defun fastrevert--process-run-queue (process)
  "Handle the results waiting in PROCESS's queue, oldest first."
  (setf (fastrevert--process-busy process) t)
  (unwind-protect
      (while (fastrevert--process-queue process)
        (let ((item (pop (fastrevert--process-queue process))))
          (apply (car item) process (cdr item))))
    (fastrevert--process-done-handling process)))

(defun fastrevert--process-done-handling (process)
  "Note that PROCESS's results are no longer being handled.
Results left in its queue, by a handler that exited non-locally (a
quit), are handled as soon as Emacs gets round to it."
  (setf (fastrevert--process-busy process) nil)
  (when (fastrevert--process-queue process)
    (run-at-time 0 nil #'fastrevert--process-resume process)))

(defun fastrevert--process-resume (process)
  "Handle the results left waiting in PROCESS's queue."
  (unless (or (fastrevert--process-busy process) (null (fastrevert--process-queue process)))
    (fastrevert--process-run-queue process)))

;;;; Delivering output through a memfd

(defvar fastrevert--memfd-file-names (make-hash-table :test #'eql)
  "Descriptor number -> the file name that opens it, made once per number.")

(defun fastrevert--process-memfd-file (fd)
  "Return a file name that opens the memfd FD."
  (or (gethash fd fastrevert--memfd-file-names)
      (puthash fd (format "/proc/self/fd/%d" fd) fastrevert--memfd-file-names)))

(defun fastrevert--process-memfd-bytes (fd beg end)
  "Return bytes [BEG, END) of the memfd FD as a unibyte string."
  (fastrevert--mod-memfd-read fd beg end))

(defconst fastrevert--memfd-insert-threshold 4096
  "Ranges of a memfd longer than this are inserted with `insert-file-contents'.
Shorter ones are read as a string and decoded: for a few bytes that
costs less than opening the file, and makes little garbage.")

(defconst fastrevert--memfd-release-step (* 1024 1024)
  "How many delivered bytes of a memfd wait before their memory is given back.")

(defun fastrevert--process-insert-range (process fd beg end)
  "Insert bytes [BEG, END) of the memfd FD at point, decoded, before markers.
They are decoded with the coding system of PROCESS, which is then
fixed to what `undecided' detected, as Emacs does for a process.
Point ends after the text.  Nothing else that `insert-file-contents'
would change is changed: `buffer-file-coding-system' is restored,
and no file name handler, format decoder or after-insert function
runs."
  (let ((start (point))
        (saved-file-coding buffer-file-coding-system)
        (coding (fastrevert--process-decoding process))
        (inserted 0))
    ;; `insert-file-contents' leaves markers at point before the text,
    ;; where `insert-before-markers' puts them after it.  A placeholder
    ;; inserted before markers, and deleted once the text is in, carries
    ;; every marker at point (the process mark, window points, overlay
    ;; ends) over the text, unseen by undo and by change hooks.
    (let ((inhibit-modification-hooks t)
          (buffer-undo-list t))
      (insert-before-markers "\n"))
    (goto-char start)
    (unwind-protect
        (let ((coding-system-for-read coding)
              (file-name-handler-alist nil)
              (after-insert-file-functions nil)
              (format-alist nil))
          (setq inserted (cadr (insert-file-contents (fastrevert--process-memfd-file fd)
                                                     nil beg end))))
      (let ((inhibit-modification-hooks t)
            (buffer-undo-list t))
        (delete-region (+ start inserted) (+ start inserted 1)))
      (unless (eq buffer-file-coding-system saved-file-coding)
        (setq buffer-file-coding-system saved-file-coding)))
    (goto-char (+ start inserted))
    (when (and last-coding-system-used (not (eq last-coding-system-used coding)))
      (setf (fastrevert--process-decoding process) last-coding-system-used))))

(defun fastrevert--process-memfd-deliver (process eof)
  "Deliver the bytes the engine wrote to PROCESS's memfd since the last time.
The end of a character that has not arrived yet, and a carriage
return that may begin a CRLF, wait for the next range, unless EOF.
Into a live multibyte buffer, in a coding system whose unfinished
characters the last bytes of the stream reveal, a range longer than
`fastrevert--memfd-insert-threshold' goes straight from the memfd;
otherwise (a short range, bytes held back from before, a unibyte or
killed buffer, a multibyte coding system of another kind, one still
to be detected where that decides where markers go) the bytes take
the string road."
  (let* ((fd (fastrevert--process-memfd process))
         (beg (fastrevert--process-memfd-consumed process))
         (written (fastrevert--process-memfd-end process))
         (coding (fastrevert--process-decoding process))
         (direct (memq (fastrevert--process-split-kind coding) '(utf-8 single)))
         (held (if (or eof (not direct)) 0
                 (min (- written beg)
                      (fastrevert--process-held-back coding
                                                     (fastrevert--process-memfd-tail process)))))
         (end (- written held))
         (buffer (fastrevert--process-buffer process)))
    (when (and fd (> end beg))
      (setf (fastrevert--process-memfd-consumed process) end)
      (cond ((not (buffer-live-p buffer))
             ;; The default filter drops output for a killed buffer.
             (fastrevert--process-count-output process))
            ((and direct
                  (> (- end beg) fastrevert--memfd-insert-threshold)
                  ;; Bytes held back from the strings before the memfd
                  ;; took over must be decoded with the first range.
                  (zerop (length (cdr (assq 1 (fastrevert--process-tails process)))))
                  (buffer-local-value 'enable-multibyte-characters buffer)
                  (not (fastrevert--process-filter process))
                  (not (fastrevert--process-detection-moves-markers-p coding)))
             (fastrevert--process-count-output process)
             (fastrevert--process-insert
              process buffer (fastrevert--process-mark process)
              (lambda () (fastrevert--process-insert-range process fd beg end))))
            (t
             (fastrevert--process-decode-and-deliver
              process 1 (fastrevert--process-memfd-bytes fd beg end) (or eof direct))))
      ;; Give back the memory of what is delivered, a step at a time;
      ;; later offsets stay valid.
      (when (>= (- end (fastrevert--process-memfd-released process))
                fastrevert--memfd-release-step)
        (setf (fastrevert--process-memfd-released process) end)
        (fastrevert--mod-memfd-release fd end nil)))))

(defun fastrevert--process-memfd-ready (process data)
  "Deliver what the engine wrote to PROCESS's memfd, as DATA reports it.
DATA holds 12-byte entries, the newest last: the memfd's size as 8
bytes little-endian, then the last 4 bytes of the stream so far."
  (let* ((at (- (length data) 12))
         (end 0))
    (dotimes (i 8)
      (setq end (logior end (ash (aref data (+ at i)) (* 8 i)))))
    (setf (fastrevert--process-memfd-end process) end
          (fastrevert--process-memfd-tail process) (substring data (+ at 8)))
    (fastrevert--process-memfd-deliver process nil)))

(defun fastrevert--process-memfd-to-tail (process)
  "Move the undelivered bytes of PROCESS's memfd to its stdout tail; close it.
For when the engine passes the rest of the output as strings."
  (let ((fd (fastrevert--process-memfd process))
        (beg (fastrevert--process-memfd-consumed process))
        (end (fastrevert--process-memfd-end process)))
    (when (> end beg)
      (let ((bytes (fastrevert--process-memfd-bytes fd beg end))
            (cell (assq 1 (fastrevert--process-tails process))))
        (setf (fastrevert--process-memfd-consumed process) end)
        (if cell
            (setcdr cell (concat (cdr cell) bytes))
          (push (cons 1 bytes) (fastrevert--process-tails process)))))
    (fastrevert--process-memfd-close process)))

(defun fastrevert--process-memfd-close (process)
  "Close PROCESS's memfd, if it has one."
  (let ((fd (fastrevert--process-memfd process)))
    (when fd
      ;; Forget it first: a descriptor number must never be closed twice.
      (setf (fastrevert--process-memfd process) nil)
      (fastrevert--mod-memfd-release fd 0 t))))

(defun fastrevert--process-flush-tails (process)
  "Deliver the bytes PROCESS held back for an unfinished character."
  (dolist (cell (fastrevert--process-tails process))
    (when (cdr cell)
      (let ((bytes (cdr cell)))
        (setcdr cell nil)
        (fastrevert--process-decode-and-deliver process (car cell) bytes t)))))

(defun fastrevert--process-status-message (process)
  "Return the sentinel event string for PROCESS's status, as Emacs words it."
  (let ((code (fastrevert--process-exit-status process))
        (core (if (fastrevert--process-core-dumped process) " (core dumped)\n" "\n")))
    (pcase (fastrevert--process-status process)
      ('exit (if (eql code 0)
                 "finished\n"
               (format "exited abnormally with code %d%s" code core)))
      ('signal
       (let ((name (fastrevert--mod-strsignal code)))
         (if (not name)
             (concat "unknown" core)
           (let ((text (decode-coding-string name (or locale-coding-system 'utf-8))))
             (concat (downcase (substring text 0 1)) (substring text 1) core)))))
      (_ "run\n"))))

(defun fastrevert--process-finish (process)
  "Report PROCESS's end to its sentinel and forget it."
  (fastrevert--process-forget process)
  (fastrevert--process-memfd-close process)
  (let ((event (fastrevert--process-status-message process))
        (sentinel (fastrevert--process-sentinel process)))
    (if sentinel
        (fastrevert--process-call "sentinel" sentinel process event)
      (fastrevert--process-default-sentinel process event))))

(defun fastrevert--process-default-sentinel (process event)
  "Insert EVENT about PROCESS into its buffer, as the stock default sentinel does."
  (let ((buffer (fastrevert--process-buffer process))
        (mark (fastrevert--process-mark process)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (let ((opoint (point))
              (old-read-only buffer-read-only)
              before)
          (goto-char (if (marker-buffer mark) mark (point-max)))
          (setq before (point))
          (setq buffer-read-only nil)
          (unwind-protect
              (insert "\nProcess " (fastrevert--process-name process) " " event)
            (setq buffer-read-only old-read-only))
          (set-marker mark (point))
          (goto-char (if (>= opoint before) (+ opoint (- (point) before)) opoint)))))))

(defun fastrevert--on-process-exit (id code data)
  "Handle the exit of engine process ID with raw wait status CODE.
DATA is empty."
  (let ((process (gethash id fastrevert--processes)))
    (when process
      (fastrevert--process-receive process #'fastrevert--process-exit code data))))

(defun fastrevert--process-exit (process code _data)
  "Report the end of PROCESS, whose raw wait status is CODE."
  (when (eq (gethash (fastrevert--process-id process) fastrevert--processes) process)
    (when (fastrevert--process-memfd process)
      (fastrevert--process-memfd-deliver process t))
    (fastrevert--process-flush-tails process)
    (cond ((< code 0)
           (setf (fastrevert--process-status process) 'exit
                 (fastrevert--process-exit-status process) -1))
          ((zerop (logand code #x7f))
           (setf (fastrevert--process-status process) 'exit
                 (fastrevert--process-exit-status process) (logand (ash code -8) #xff)))
          (t
           (setf (fastrevert--process-status process) 'signal
                 (fastrevert--process-exit-status process) (logand code #x7f)
                 (fastrevert--process-core-dumped process) (/= 0 (logand code #x80)))))
    (fastrevert--process-finish process)))

(defun fastrevert--on-process-error (id code data)
  "Handle the engine giving up engine process ID, for the reason DATA.
CODE is 0."
  (let ((process (gethash id fastrevert--processes)))
    (when process
      (fastrevert--process-receive process #'fastrevert--process-failed code data))))

(defun fastrevert--process-failed (process _code reason)
  "Report that the engine gave PROCESS up, for REASON, and killed it.
Its output could not all be read, so it ends here, as killed; its
exit, when the engine reports it, is not reported again."
  (when (eq (gethash (fastrevert--process-id process) fastrevert--processes) process)
    (message "error in process %s: %s" (fastrevert--process-name process) reason)
    (fastrevert--process-kill process)))

(defun fastrevert--process-kill (process)
  "End PROCESS as killed, and tell its sentinel."
  (fastrevert--process-memfd-close process)
  (setf (fastrevert--process-status process) 'signal
        (fastrevert--process-exit-status process) 9)
  (fastrevert--process-finish process))

(defun fastrevert--process-engine-stopped ()
  "Report the end of every process, after the engine stopped and killed them."
  (let (processes)
    (maphash (lambda (_id process) (push process processes)) fastrevert--processes)
    (dolist (process (nreverse processes))
      (when (eq (fastrevert--process-status process) 'run)
        (fastrevert--process-kill process)))))

(setf (alist-get 'process-output fastrevert--record-handlers) #'fastrevert--on-process-output)
(setf (alist-get 'process-exit fastrevert--record-handlers) #'fastrevert--on-process-exit)
(setf (alist-get 'process-error fastrevert--record-handlers) #'fastrevert--on-process-error)
(add-hook 'fastrevert--engine-stopped-hook #'fastrevert--process-engine-stopped)

;;;; fastrevert-make-process

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

(defun fastrevert--process-output-buffer (spec)
  "Return the buffer SPEC names, creating it, or nil for nil."
  (and spec (or (get-buffer spec)
                (if (stringp spec) (get-buffer-create spec)
                  (signal 'wrong-type-argument (list 'bufferp spec))))))

(defun fastrevert--process-new-mark (buffer)
  "Return a new process mark at the end of BUFFER, or an unset marker."
  (let ((mark (make-marker)))
    ;; A killed buffer is accepted, as `make-process' accepts it: its
    ;; output goes nowhere.
    (when (buffer-live-p buffer)
      (set-marker mark (with-current-buffer buffer (point-max)) buffer))
    mark))

;;;###autoload
(defun fastrevert-make-process (&rest args)
  "Start a child process, its output read by fastrevert's engine.
ARGS are keywords, as for `make-process':

:name NAME       the process name (a string; made unique);
:buffer BUFFER   the buffer or buffer name output goes to, or nil;
:command COMMAND the program and its arguments, a list of strings;
:coding CODING   a coding system, or (DECODING . ENCODING);
:noquery QUERY   non-nil means do not ask about it when Emacs exits;
:stderr STDERR   a buffer or buffer name for standard error; nil
                 mixes standard error with the output;
:filter FILTER   called as (FILTER PROCESS STRING), once per stream
                 per batch of output;
:sentinel SENTINEL called as (SENTINEL PROCESS EVENT) once, after
                 all output, with Emacs's usual EVENT strings;
:framing FRAMING nil (raw chunks), `lines' (the filter sees only
                 complete lines) or `lsp' (only complete
                 Content-Length messages).

Without a filter, output is inserted into BUFFER at the process mark
as the default filter does; standard output then goes through a
memfd and `insert-file-contents', with no Lisp string made.  Return
a `fastrevert-process'.  The program is found through the variable
`exec-path' and runs in `default-directory' with
`process-environment'; a missing program signals the error
`make-process' signals."
  (let* ((name (plist-get args :name))
         (command (plist-get args :command))
         (framing (plist-get args :framing))
         (filter (plist-get args :filter))
         (sentinel (plist-get args :sentinel))
         (stderr-spec (plist-get args :stderr)))
    (unless (stringp name)
      ;; The stock primitive signals the error the running Emacs words for a
      ;; missing or wrong :name (Emacs 30 words its own), and makes no
      ;; process then.  Called with no argument at all, it does nothing.
      (apply #'make-process (if (plist-member args :name) (list :name name) '(:noquery t)))
      (signal 'wrong-type-argument (list 'stringp name)))
    (unless (consp command) (signal 'wrong-type-argument (list 'consp command)))
    (dolist (word command)
      (unless (stringp word) (signal 'wrong-type-argument (list 'stringp word))))
    (unless (memq framing '(nil lines lsp))
      (signal 'wrong-type-argument (list 'fastrevert-framing-p framing)))
    (dolist (function (list filter sentinel))
      (unless (or (null function) (functionp function))
        (signal 'wrong-type-argument (list 'functionp function))))
    (fastrevert--engine-ensure)
    (let* ((buffer (fastrevert--process-output-buffer (plist-get args :buffer)))
           (stderr-buffer (fastrevert--process-output-buffer stderr-spec))
           (program (car command))
           (dir (fastrevert--process-directory))
           (encoded-path (fastrevert--process-program program))
           (coding (fastrevert--process-coding (plist-get args :coding)
                                               (cons name (cons buffer command))))
           (encoded-args (fastrevert--process-encode-args
                          (cons 'start-process (cons name (cons buffer command)))
                          (cdr command)))
           (id (fastrevert--process-new-id))
           (process (fastrevert--process-start-record
                     id (fastrevert--process-unique-name name) command
                     buffer (fastrevert--process-new-mark buffer)
                     stderr-buffer (fastrevert--process-new-mark stderr-buffer)
                     filter sentinel (car coding) (cdr coding)
                     (not (plist-get args :noquery)) fastrevert--engine-generation))
           (result (fastrevert--mod-process-start
                    id encoded-path (vconcat (list encoded-path) encoded-args)
                    (fastrevert--process-environment dir)
                    (fastrevert--process-encode-file dir)
                    t (if (and buffer (not filter)) 'memfd t)
                    (if stderr-buffer 'pipe t) framing
                    (max 4096 read-process-output-max))))
      (when (eq (car-safe result) :error)
        (fastrevert--process-raise result nil))
      (setf (fastrevert--process-pid process) result)
      (puthash id process fastrevert--processes)
      (puthash (fastrevert--process-name process) process fastrevert--process-names)
      process)))

;;;; Companions

(defun fastrevert-process-live-p (process)
  "Return non-nil if PROCESS, a `fastrevert-process', is still running."
  (fastrevert--process-check process)
  (and (eq (fastrevert--process-status process) 'run)
       (eq (gethash (fastrevert--process-id process) fastrevert--processes) process)
       (eql (fastrevert--process-engine process) fastrevert--engine-generation)
       (fastrevert--mod-running-p)
       t))

(defun fastrevert-process-status (process)
  "Return the status of PROCESS: `run', `exit' or `signal'."
  (fastrevert--process-check process)
  (if (and (eq (fastrevert--process-status process) 'run)
           (not (fastrevert-process-live-p process)))
      'signal
    (fastrevert--process-status process)))

(defun fastrevert-process-name (process)
  "Return the name of PROCESS, a `fastrevert-process'."
  (fastrevert--process-check process)
  (fastrevert--process-name process))

(defun fastrevert-process-command (process)
  "Return the command that started PROCESS, a list of strings."
  (fastrevert--process-check process)
  (fastrevert--process-command process))

(defun fastrevert-process-filter (process)
  "Return the filter function of PROCESS, or nil."
  (fastrevert--process-check process)
  (fastrevert--process-filter process))

(defun fastrevert-process-sentinel (process)
  "Return the sentinel function of PROCESS, or nil."
  (fastrevert--process-check process)
  (fastrevert--process-sentinel process))

(defun fastrevert-process-exit-status (process)
  "Return the exit code of PROCESS, or the number of the signal that ended it.
Return 0 while it runs."
  (fastrevert--process-check process)
  (fastrevert--process-exit-status process))

(defun fastrevert-process-buffer (process)
  "Return the buffer that receives the output of PROCESS, or nil."
  (fastrevert--process-check process)
  (fastrevert--process-buffer process))

(defun fastrevert-process-mark (process)
  "Return the process mark of PROCESS, the position for its output."
  (fastrevert--process-check process)
  (fastrevert--process-mark process))

(defun fastrevert-process-id-of (process)
  "Return the operating system's process id of PROCESS."
  (fastrevert--process-check process)
  (fastrevert--process-pid process))

(defun fastrevert-process-query-on-exit-flag (process)
  "Return non-nil if Emacs asks before killing PROCESS at exit."
  (fastrevert--process-check process)
  (fastrevert--process-query-on-exit process))

(defun fastrevert-set-process-query-on-exit-flag (process flag)
  "Make Emacs ask before killing PROCESS at exit if FLAG is non-nil."
  (fastrevert--process-check process)
  (setf (fastrevert--process-query-on-exit process) flag))

(defvar fastrevert--not-running-says-why 'unknown
  "Whether this Emacs's error for a process that is not running says why.
Emacs 30 adds the status to \"Process NAME not running\"; earlier
versions do not.  Found out once, from a stock pipe process.")

(defun fastrevert--process-not-running (process)
  "Signal the error stock Emacs signals for sending to PROCESS, which has ended."
  (when (eq fastrevert--not-running-says-why 'unknown)
    (let ((probe (make-pipe-process :name " *fastrevert-probe*" :noquery t :buffer nil)))
      (delete-process probe)
      (setq fastrevert--not-running-says-why
            (condition-case error
                (progn (process-send-string probe "") nil)
              (error (and (stringp (cadr error))
                          (string-match-p " not running: " (cadr error))
                          t))))))
  (if fastrevert--not-running-says-why
      (error "Process %s not running: %s" (fastrevert--process-name process)
             (fastrevert--process-status-message process))
    (error "Process %s not running" (fastrevert--process-name process))))

(defun fastrevert-process-send-string (process string)
  "Send STRING to the standard input of PROCESS, encoded with its coding.
This never blocks: whatever the pipe does not take now is queued and
written as the child reads."
  (fastrevert--process-check process)
  (unless (stringp string) (signal 'wrong-type-argument (list 'stringp string)))
  (unless (fastrevert-process-live-p process)
    (fastrevert--process-not-running process))
  (fastrevert--mod-process-send
   (fastrevert--process-id process)
   (if (multibyte-string-p string)
       (encode-coding-string string (fastrevert--process-encoding process) t)
     string))
  nil)

(defun fastrevert-process-send-eof (process)
  "Close the standard input of PROCESS once all queued input is written.
Return PROCESS."
  (fastrevert--process-check process)
  (unless (fastrevert-process-live-p process)
    (fastrevert--process-not-running process))
  (fastrevert--mod-process-eof (fastrevert--process-id process))
  process)

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

(defun fastrevert-process-signal (process sigcode)
  "Send PROCESS the signal SIGCODE, a number or a name such as `SIGINT' or `int'.
The signal goes to the child's process group, as `kill-process' and
`interrupt-process' send it.  Return 0, or -1 when PROCESS has ended
or there is no such signal, as `signal-process' returns then."
  (fastrevert--process-check process)
  (let ((number (fastrevert--signal-number sigcode)))
    (if (or (not (fastrevert-process-live-p process))
            ;; What kill(2) refuses with EINVAL.
            (not (<= 0 number 64)))
        -1
      (fastrevert--mod-process-signal (fastrevert--process-id process) number)
      0)))

(defun fastrevert--process-kill-buffer ()
  "Send SIGHUP to the live processes that write to the current buffer.
Killing a buffer does so to its processes in stock Emacs.  Run from
`kill-buffer-hook'."
  (when (> (hash-table-count fastrevert--processes) 0)
    (let ((buffer (current-buffer))
          (hangup (fastrevert--mod-signal-number "HUP"))
          (targets nil))
      (maphash (lambda (_id process)
                 (when (eq (fastrevert--process-buffer process) buffer)
                   (push process targets)))
               fastrevert--processes)
      (dolist (process targets)
        (when (fastrevert-process-live-p process)
          (fastrevert--mod-process-signal (fastrevert--process-id process) hangup))))))

(add-hook 'kill-buffer-hook #'fastrevert--process-kill-buffer)

(defun fastrevert-delete-process (process)
  "Kill PROCESS, forget it and tell its sentinel, as `delete-process' does.
The sentinel gets \"killed\\n\" at once unless the process had already
ended; the child is reaped in the background."
  (fastrevert--process-check process)
  (let ((id (fastrevert--process-id process)))
    (when (eq (gethash id fastrevert--processes) process)
      (fastrevert--mod-process-remove id)
      (setf (fastrevert--process-status process) 'signal
            (fastrevert--process-exit-status process) 9)
      (fastrevert--process-finish process)))
  nil)

(defconst fastrevert--process-wait-slice 0.02
  "Seconds `fastrevert-accept-process-output' waits natively at a time.
Between slices Emacs runs its timers and other processes' filters.")

(defun fastrevert-accept-process-output (&optional process seconds millisec just-this-one)
  "Wait for output from PROCESS, as `accept-process-output' does.
PROCESS is a `fastrevert-process', or nil for output from any
fastrevert process.  SECONDS and MILLISEC bound the wait; without
them, wait until output arrives (or PROCESS has ended).
JUST-THIS-ONE non-nil runs no other process filters meanwhile, and
an integer runs no timers either.  Return non-nil if output (or
PROCESS's end) was handled.

The wait is native: the engine's results are taken as soon as they
are ready, not when Emacs's event loop next reads the engine's wake
pipe.  It happens in slices of `fastrevert--process-wait-slice'
seconds; at least that often, Emacs runs its timers and other
processes' filters as JUST-THIS-ONE allows, however busy the
output.  Quitting interrupts the wait."
  (when process (fastrevert--process-check process))
  (fastrevert--engine-ensure)
  (let* ((timeout (fastrevert--process-timeout seconds millisec))
         (deadline (and timeout (+ (float-time) timeout)))
         (id (and process (fastrevert--process-id process)))
         (start (if process (fastrevert--process-outputs process)
                  fastrevert--process-output-count))
         (was-live (or (null process) (eq (gethash id fastrevert--processes) process)))
         (got nil)
         (done (and process (not was-live))))
    ;; Results already queued are handled first: a batch may be waiting
    ;; for its wake byte to be read.
    (fastrevert--drain)
    (while (not done)
      (setq got (or (/= start (if process (fastrevert--process-outputs process)
                                fastrevert--process-output-count))
                    (and process (not (eq (gethash id fastrevert--processes) process)))))
      (if (or got (and deadline (<= deadline (float-time))))
          (setq done t)
        (if (fastrevert--mod-wait
             (if deadline
                 (max 0 (min fastrevert--process-wait-slice (- deadline (float-time))))
               fastrevert--process-wait-slice))
            (fastrevert--drain)
          (fastrevert--process-yield just-this-one)))
      ;; A stream that keeps results ready, call after call, must not keep
      ;; timers from running: they get their turn at least once a slice.
      (when (>= (- (float-time) fastrevert--process-last-yield) fastrevert--process-wait-slice)
        (fastrevert--process-yield just-this-one)))
    got))

(defun fastrevert--process-timeout (seconds millisec)
  "Return the seconds SECONDS and MILLISEC bound a wait to, or nil for none.
As `accept-process-output' reads them: SECONDS a number, MILLISEC a
fixnum; a NaN or a negative total means no wait at all."
  (when (and seconds (not (numberp seconds)))
    (signal 'wrong-type-argument (list 'numberp seconds)))
  (when (and millisec (not (fixnump millisec)))
    (signal 'wrong-type-argument (list 'fixnump millisec)))
  (when (or seconds millisec)
    (let ((total (+ (or seconds 0) (/ (or millisec 0) 1000.0))))
      (if (or (isnan (float total)) (< total 0)) 0 total))))

(defvar fastrevert--process-last-yield 0.0
  "When `fastrevert--process-yield' last ran, as a `float-time'.")

(defun fastrevert--process-yield (just-this-one)
  "Let Emacs run what a wait may run meanwhile, without waiting.
With JUST-THIS-ONE nil, timers and every process's filters run; with
another non-integer, timers only; with an integer, nothing."
  (setq fastrevert--process-last-yield (float-time))
  (let ((wake fastrevert--wake-process))
    (cond ((integerp just-this-one))
          ((not (process-live-p wake))
           (unless just-this-one (accept-process-output nil 0)))
          (t
           ;; The wait drains the engine itself.  Meanwhile no wake byte
           ;; is written: a busy stream would keep the pipe readable, and
           ;; Emacs reads a pipe for as long as it stays readable.
           (fastrevert--mod-hold-wakes t)
           (unwind-protect
               ;; Waiting on the wake pipe alone runs timers only.
               (accept-process-output (and just-this-one wake) 0 nil just-this-one)
             (fastrevert--mod-hold-wakes nil))))))

(defun fastrevert-process-list ()
  "Return the live fastrevert processes."
  (let (processes stale)
    (maphash (lambda (id process)
               (if (fastrevert-process-live-p process)
                   (push process processes)
                 (push id stale)))
             fastrevert--processes)
    ;; Processes an engine restart killed never report an exit.
    (dolist (id stale)
      (let ((process (gethash id fastrevert--processes)))
        (fastrevert--process-memfd-close process)
        (fastrevert--process-forget process)))
    processes))

(defun fastrevert--process-kill-emacs-query ()
  "Ask before exiting while a fastrevert process that wants a query is live.
Return non-nil to let Emacs exit, with the question stock Emacs asks."
  (let ((active (cl-some (lambda (process)
                           (and (fastrevert--process-query-on-exit process)
                                (fastrevert-process-live-p process)))
                         (fastrevert-process-list))))
    (or (not active)
        (yes-or-no-p "Active processes exist; kill them and exit anyway? "))))

(add-hook 'kill-emacs-query-functions #'fastrevert--process-kill-emacs-query)

(defun fastrevert-process-unload-function ()
  "Kill every fastrevert process, for `unload-feature' of this library.
Their sentinels are told, and nothing that runs later (a hook, a
result of the engine) calls a function of this library any more.
Return nil, so that `unload-feature' goes on to remove the rest."
  (let (processes)
    (maphash (lambda (_id process) (push process processes)) fastrevert--processes)
    (dolist (process processes)
      (fastrevert-delete-process process)))
  (remove-hook 'kill-emacs-query-functions #'fastrevert--process-kill-emacs-query)
  (remove-hook 'kill-buffer-hook #'fastrevert--process-kill-buffer)
  (remove-hook 'fastrevert--engine-stopped-hook #'fastrevert--process-engine-stopped)
  (dolist (kind '(process-output process-exit process-error))
    (setf (alist-get kind fastrevert--record-handlers nil t) nil))
  nil)

(provide 'fastrevert-process)

;;; fastrevert-process.el ends here
