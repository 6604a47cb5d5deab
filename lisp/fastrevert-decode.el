;;; fastrevert-decode.el --- From a child's bytes to text in a buffer -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; A child's output arrives in pieces cut wherever its writes and the
;; engine's reads happened to end.  This file turns those pieces into
;; the text stock Emacs would have made of the whole:
;;
;; - incremental decoding: the bytes of a character, a CRLF or an
;;   ISO 2022 escape sequence that a cut split wait for the next
;;   piece, and a stateful coding's designations carry over;
;; - inserting output into a buffer as Emacs's default filter does,
;;   markers, narrowing and read-only text included;
;; - inserting a byte range of a memfd (an anonymous in-memory file the
;;   engine filled; where there is none, a file with no name left)
;;   straight into the buffer gap, decoded by `insert-file-contents',
;;   with no Lisp string made.
;;
;; Nothing here knows of the engine or of processes: the process
;; object (fastrevert-process.el) and the `call-process' drop-in
;; (fastrevert-call.el) build on it.

;;; Code:

(require 'cl-lib)

(defvar format-alist)

;;;; Incremental decoding

(cl-defstruct (fastrevert--decoder
               (:constructor nil)
               (:copier nil))
  "What decoding a child's output carries from one piece to the next.
A `fastrevert-process' is one."
  (decoding nil :documentation "The coding system that decodes output.
It is fixed to what `undecided' detected once it has detected something.")
  (tails nil :documentation "Undecoded bytes per stream, as (STREAM . BYTES).")
  (states nil :documentation "Per stream, as (STREAM . STATE): the ISO 2022 state
at the end of what was decoded, for a stateful ISO 2022 coding."))

(defvar fastrevert--split-kinds (make-hash-table :test #'eq)
  "Coding system -> its `fastrevert--split-kind', once computed.")

(defun fastrevert--split-kind (coding)
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

(defun fastrevert--held-back (coding bytes)
  "Return how many bytes at the end of BYTES must wait for more output.
These are the start of a character that CODING cannot decode yet,
and a carriage return that may begin a CRLF under a DOS coding.
For the `decoded' and `iso-2022' kinds of
`fastrevert--split-kind' that needs decoding, and 0 is returned
here."
  (let* ((kind (fastrevert--split-kind coding))
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

(defun fastrevert--process-decode (decoder stream data eof)
  "Return DATA, output on STREAM that DECODER decodes, decoded.
DECODER is a `fastrevert--decoder', such as a `fastrevert-process'.
Bytes that end in the middle of a character are kept for the next
batch, unless EOF; the coding system is then fixed to the one
`undecided' detected, as Emacs does for a process.  For a stateful
ISO 2022 coding, the designations and shifts in effect carry over."
  (let* ((cell (assq stream (fastrevert--decoder-tails decoder)))
         (all (if (and cell (> (length (cdr cell)) 0)) (concat (cdr cell) data) data))
         (coding (fastrevert--decoder-decoding decoder))
         (kind (fastrevert--split-kind coding))
         (state-cell (and (eq kind 'iso-2022) (assq stream (fastrevert--decoder-states decoder))))
         (state (if state-cell (cdr state-cell) (make-vector 5 nil)))
         (cut (and (eq kind 'iso-2022) (not eof) (fastrevert--iso-2022-cut state all)))
         (held (cond (eof 0)
                     (cut (car cut))
                     (t (fastrevert--held-back coding all))))
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
          (push (cons stream (cdr cut)) (fastrevert--decoder-states decoder)))))
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
          (push (cons stream kept) (fastrevert--decoder-tails decoder)))))
    (unless (eq (coding-system-type coding) 'raw-text)
      (when (and last-coding-system-used
                 (not (eq last-coding-system-used coding)))
        (setf (fastrevert--decoder-decoding decoder)
              (fastrevert--continuing-coding last-coding-system-used))))
    text))

(defun fastrevert--continuing-coding (coding)
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

(defun fastrevert--detection-moves-markers-p (coding)
  "Non-nil when detecting CODING's coding system would change where markers go.
That is while CODING is still to be detected (`undecided', or a byte
order mark to look for) and Emacs's native default filter is on; see
`fastrevert--insert-output'."
  (and (bound-and-true-p fast-read-process-output)
       (or (eq (coding-system-type coding) 'undecided)
           (consp (coding-system-get coding :bom)))))

;;;; Inserting

(defun fastrevert--insert-output (buffer mark text &optional detected)
  "Insert TEXT, process output, into BUFFER at MARK, as the default filter does.
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

(defvar fastrevert--memfd-file-names (make-hash-table :test #'eql)
  "Descriptor number -> the file name that opens it, made once per number.")

(defconst fastrevert--descriptor-name-format
  (if (file-directory-p "/proc/self/fd") "/proc/self/fd/%d" "/dev/fd/%d")
  "The name of one of Emacs's own descriptors, for `format'.
Linux's /proc/self/fd/N opens the file anew; elsewhere (macOS, the
BSDs, where FreeBSD wants fdescfs mounted on /dev/fd) /dev/fd/N
duplicates the descriptor.  The module reads and writes the files
it hands over at explicit offsets only, and makes a pipe blocking
before it hands it over there, so either serves.")

(defun fastrevert--memfd-file-name (fd)
  "Return a file name that opens the memfd FD, or the pipe FD."
  (or (gethash fd fastrevert--memfd-file-names)
      (puthash fd (format fastrevert--descriptor-name-format fd)
               fastrevert--memfd-file-names)))

(defun fastrevert--insert-memfd-range (fd beg end coding &optional before-markers)
  "Insert bytes [BEG, END) of the memfd FD at point, decoded with CODING.
Return the coding system the decoding used, which tells what
`undecided' detected.  Point ends after the text.  With
BEFORE-MARKERS non-nil, markers at point end after the text too, as
`insert-before-markers' leaves them.  Nothing else that
`insert-file-contents' would change is changed:
`buffer-file-coding-system' is restored, and no file name handler,
format decoder or after-insert function runs."
  (let ((start (point))
        (saved-file-coding buffer-file-coding-system)
        (inserted 0))
    (when before-markers
      ;; `insert-file-contents' leaves markers at point before the text,
      ;; where `insert-before-markers' puts them after it.  A placeholder
      ;; inserted before markers, and deleted once the text is in, carries
      ;; every marker at point (a process mark, window points, overlay
      ;; ends) over the text, unseen by undo and by change hooks.
      (let ((inhibit-modification-hooks t)
            (buffer-undo-list t))
        (insert-before-markers "\n"))
      (goto-char start))
    (unwind-protect
        (let ((coding-system-for-read coding)
              (file-name-handler-alist nil)
              (after-insert-file-functions nil)
              (format-alist nil))
          (setq inserted (cadr (insert-file-contents (fastrevert--memfd-file-name fd)
                                                     nil beg end))))
      (when before-markers
        (let ((inhibit-modification-hooks t)
              (buffer-undo-list t))
          (delete-region (+ start inserted) (+ start inserted 1))))
      (unless (eq buffer-file-coding-system saved-file-coding)
        (setq buffer-file-coding-system saved-file-coding)))
    (goto-char (+ start inserted))
    last-coding-system-used))

(provide 'fastrevert-decode)

;;; fastrevert-decode.el ends here
