;;; fastrevert-call-process-test.el --- fastrevert-call-process against call-process -*- lexical-binding: t; -*-

;;; Commentary:

;; Differential tests: every case runs the same command through stock
;; `call-process' and through `fastrevert-call-process', each in a
;; fresh buffer prepared the same way, and requires the same return
;; value, buffer text (with properties), point, markers, undo list,
;; `last-coding-system-used' and `buffer-file-coding-system'.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'fastrevert)
(require 'fastrevert-call)

(defun fastrevert-call-process-test--observe (function setup call)
  "Run CALL with FUNCTION in a fresh buffer prepared by SETUP.
CALL gets FUNCTION (`call-process' or its drop-in) and makes the
call.  Return everything the call may have changed, as a plist."
  (let ((buffer (generate-new-buffer " *fastrevert-call-process-test*")))
    (unwind-protect
        (with-current-buffer buffer
          (when setup (funcall setup))
          (setq last-coding-system-used 'fastrevert-test-unset)
          (let* ((before (copy-marker (point)))
                 (after (copy-marker (point) t))
                 (result (condition-case err
                             (funcall call function)
                           ;; Printed while the buffer lives, so that error
                           ;; data naming a buffer compare by name.
                           (error (list 'signalled (prin1-to-string err))))))
            (list :result result
                  :text (buffer-string)
                  :point (point)
                  :markers (list (marker-position before) (marker-position after))
                  ;; After a signal, `last-coding-system-used' is not part of
                  ;; the contract: under ERT stock leaves it set by the
                  ;; error machinery.
                  :coding (if (eq (car-safe result) 'signalled) 'signalled
                            last-coding-system-used)
                  :file-coding buffer-file-coding-system
                  :multibyte enable-multibyte-characters
                  :undo buffer-undo-list
                  :current (eq (current-buffer) buffer))))
      (kill-buffer buffer))))

(defun fastrevert-call-process-test--same (call &optional setup)
  "Require CALL to observe the same with both implementations; return stock's.
CALL and SETUP are as for `fastrevert-call-process-test--observe'."
  (let ((stock (fastrevert-call-process-test--observe #'call-process setup call))
        (native (fastrevert-call-process-test--observe #'fastrevert-call-process setup call)))
    (should (equal native stock))
    stock))

(defun fastrevert-call-process-test--text-at-point ()
  "Fill the current buffer with text and put point inside it."
  (insert "before|after")
  (goto-char 8))

;;;; Destinations

(ert-deftest fastrevert-call-process-destination-t-inserts-at-point-like-stock ()
  (let ((stock (fastrevert-call-process-test--same
                (lambda (call) (funcall call "printf" nil t nil "one\\ntwo\\n"))
                #'fastrevert-call-process-test--text-at-point)))
    (should (equal (plist-get stock :text) "before|one\ntwo\nafter"))
    (should (= (plist-get stock :point) 16))))

(ert-deftest fastrevert-call-process-records-undo-like-stock ()
  (let ((stock (fastrevert-call-process-test--same
                (lambda (call) (funcall call "printf" nil t nil "undoable"))
                (lambda ()
                  (buffer-enable-undo)
                  (fastrevert-call-process-test--text-at-point)
                  (undo-boundary)))))
    (should (consp (plist-get stock :undo)))))

(ert-deftest fastrevert-call-process-destination-buffer-object-and-name ()
  (dolist (kind '(object existing-name new-name))
    (let ((observe
           (lambda (function)
             (let* ((name (format " *fastrevert-cp-target-%s*" kind))
                    (target (unless (eq kind 'new-name)
                              (with-current-buffer (get-buffer-create name)
                                (insert "0123")
                                (goto-char 3)
                                (current-buffer)))))
               (unwind-protect
                   (with-temp-buffer
                     (let ((result (funcall function "printf" nil
                                            (if (eq kind 'object) target name)
                                            nil "xyz")))
                       (list result (buffer-string)
                             (with-current-buffer name
                               (list (buffer-string) (point))))))
                 (kill-buffer name))))))
      (should (equal (funcall observe #'fastrevert-call-process)
                     (funcall observe #'call-process))))))

(ert-deftest fastrevert-call-process-destination-nil-discards-and-waits ()
  (let ((stock (fastrevert-call-process-test--same
                (lambda (call) (funcall call "sh" nil nil nil "-c" "echo out; echo err >&2; exit 4"))
                #'fastrevert-call-process-test--text-at-point)))
    (should (eql (plist-get stock :result) 4))))

(ert-deftest fastrevert-call-process-destination-zero-returns-at-once-and-runs ()
  (fastrevert-test-with-temp-dir dir
    (let ((done (expand-file-name "done" dir)))
      (should (null (fastrevert-call-process
                     "sh" nil 0 nil "-c" (format "sleep 0.2; echo ran > %s" done))))
      (should-not (file-exists-p done))
      (should (fastrevert-test-wait-for (lambda () (file-exists-p done))))
      (should (null (call-process "true" nil 0))))))

(ert-deftest fastrevert-call-process-destination-file-and-stderr-forms ()
  (fastrevert-test-with-temp-dir dir
    (dolist (destination-of
             (list (lambda (out _err) (list :file out))
                   (lambda (out err) (list (list :file out) err))
                   (lambda (out _err) (list (list :file out) nil))
                   (lambda (out _err) (list (list :file out) t))
                   (lambda (_out err) (list t err))
                   (lambda (_out _err) (list t nil))
                   (lambda (_out _err) (list t t))
                   (lambda (_out err) (list nil err))
                   (lambda (_out _err) (list nil t))))
      (let ((observe
             (lambda (function)
               (let* ((out (expand-file-name "out" dir))
                      (err (expand-file-name "err" dir))
                      (read (lambda (file)
                              (and (file-exists-p file)
                                   (with-temp-buffer
                                     (insert-file-contents file)
                                     (delete-file file)
                                     (buffer-string))))))
                 (with-temp-buffer
                   (let ((result (funcall function "sh" nil (funcall destination-of out err) nil
                                          "-c" "echo to-out; echo to-err >&2; exit 2")))
                     (list result (buffer-string) (funcall read out) (funcall read err))))))))
        (should (equal (funcall observe #'fastrevert-call-process)
                       (funcall observe #'call-process)))))))

(ert-deftest fastrevert-call-process-infile-feeds-stdin ()
  (fastrevert-test-with-temp-dir dir
    (let ((input (expand-file-name "input" dir)))
      (with-temp-file input (insert "line one\nline two\n"))
      (fastrevert-call-process-test--same
       (lambda (call) (funcall call "cat" input t)))
      ;; A relative INFILE is found through `default-directory'.
      (let ((default-directory dir))
        (fastrevert-call-process-test--same
         (lambda (call) (funcall call "wc" "input" t nil "-l")))))))

;;;; Exit codes and signals

(ert-deftest fastrevert-call-process-exit-codes-match ()
  (dolist (code '(0 1 3 127 255))
    (let ((stock (fastrevert-call-process-test--same
                  (lambda (call) (funcall call "sh" nil t nil "-c" (format "exit %d" code))))))
      (should (eql (plist-get stock :result) code)))))

(ert-deftest fastrevert-call-process-killed-by-signal-returns-description ()
  (dolist (signal '("KILL" "TERM" "SEGV" "INT"))
    (let ((stock (fastrevert-call-process-test--same
                  (lambda (call)
                    (funcall call "sh" nil t nil "-c"
                             (format "echo dying; kill -%s $$" signal))))))
      (should (stringp (plist-get stock :result))))))

(ert-deftest fastrevert-call-process-exec-failure-reports-like-stock ()
  (fastrevert-test-with-temp-dir dir
    (let ((bogus (expand-file-name "bogus" dir)))
      (with-temp-file bogus (insert "not a program\n"))
      (set-file-modes bogus #o755)
      (fastrevert-call-process-test--same (lambda (call) (funcall call bogus nil t)))
      (fastrevert-call-process-test--same (lambda (call) (funcall call bogus nil nil))))))

;;;; Coding systems

(ert-deftest fastrevert-call-process-decodes-utf-8-latin-1-and-binary-alike ()
  (dolist (coding '(nil utf-8 utf-8-unix latin-1 no-conversion binary undecided utf-8-dos))
    (ert-info ((format "coding %S" coding))
      (fastrevert-call-process-test--same
       (lambda (call)
         (let ((coding-system-for-read coding))
           (funcall call "printf" nil t nil "caf\\303\\251 caf\\351 \\342\\202\\254\\r\\nend")))))))

(ert-deftest fastrevert-call-process-decodes-alike-either-side-of-the-string-limit ()
  "Output of up to 16 KiB arrives as a string, longer output another way.
Every path decodes exactly as stock does, in multibyte and unibyte
buffers, with detection, CRLF and invalid bytes."
  (fastrevert-test-with-temp-dir dir
    (let ((tail "caf\303\251 caf\351 \342\202\254\r\n\377end\r\n")
          (files nil))
      ;; Not 16385: its last CRLF straddles stock's first read of 16 KiB,
      ;; and stock, still detecting the end-of-line type on that read,
      ;; keeps the CR, which no one read of the whole output can match.
      (dolist (size (list 1024 1025 16384 16386 65537 (* 3 65536)))
        (let ((file (expand-file-name (format "out-%d" size) dir))
              (coding-system-for-write 'no-conversion))
          (with-temp-file file
            (set-buffer-multibyte nil)
            (while (< (buffer-size) (- size (length tail)))
              (insert "padding line\r\n"))
            (delete-region (1+ (- size (length tail))) (point-max))
            (insert tail))
          (should (= (file-attribute-size (file-attributes file)) size))
          (push file files)))
      (dolist (file files)
        (dolist (coding '(nil utf-8 latin-1 no-conversion undecided utf-8-dos))
          (dolist (multibyte '(t nil))
            (ert-info ((format "%s, coding %S, multibyte %S"
                               (file-name-nondirectory file) coding multibyte))
              (fastrevert-call-process-test--same
               (lambda (call)
                 (let ((coding-system-for-read coding))
                   (funcall call "cat" nil t nil file)))
               (lambda () (set-buffer-multibyte multibyte))))))))))

(ert-deftest fastrevert-call-process-decodes-alike-at-every-path-threshold-and-pace ()
  "Output around each size where the path changes, at three paces, as stock.
The sizes straddle the string limit (16 KiB), a pipe's default capacity
\(64 KiB) and a chunk of the memfd path; their bytes put a multibyte
character and a CRLF across each of those boundaries.  The child writes
all at once (cat), in 4 KiB pieces (dd), or half, a pause, and the
rest: a fast child goes through the memfd, a slower one straight from
the pipe, and each must come out as stock's."
  (fastrevert-test-with-temp-dir dir
    (let ((files nil))
      (dolist (size (list 16383 16384 16385 65535 65536 65537 (* 3 65537)))
        (let ((file (expand-file-name (format "out-%d" size) dir))
              (coding-system-for-write 'no-conversion))
          (with-temp-file file
            (set-buffer-multibyte nil)
            (let ((line "line caf\303\251 \342\202\254\r\n")
                  (i 0))
              (while (< (buffer-size) size)
                ;; Every 4 KiB and 16 KiB boundary (and 64 KiB, being one
                ;; of them) falls inside a character or a CRLF.
                (let ((at (buffer-size)))
                  (insert (if (memq (% (+ at 3) 4096) '(0 1 2)) "\342\202\254" line)))
                (setq i (1+ i))))
            (delete-region (1+ size) (point-max)))
          (push file files)))
      (dolist (file files)
        (dolist (pace '("cat \"$0\"" "dd if=\"$0\" bs=4096 status=none"
                        "head -c 8192 \"$0\"; sleep 0.02; tail -c +8193 \"$0\""))
          (dolist (coding '(nil utf-8 utf-8-dos latin-1 undecided no-conversion))
            (dolist (multibyte '(t nil))
              (ert-info ((format "%s, %s, coding %S, multibyte %S"
                                 (file-name-nondirectory file) pace coding multibyte))
                (fastrevert-call-process-test--same
                 (lambda (call)
                   (let ((coding-system-for-read coding))
                     (funcall call "sh" nil t nil "-c" pace file)))
                 (lambda () (set-buffer-multibyte multibyte)))))))))))

(ert-deftest fastrevert-call-process-keeps-invalid-bytes-as-raw-bytes ()
  (let ((stock (fastrevert-call-process-test--same
                (lambda (call)
                  (funcall call "printf" nil t nil "a\\377b\\300\\200c\\355\\240\\200d\\342\\202")))))
    (should (string-match-p "\377" (plist-get stock :text)))))

(ert-deftest fastrevert-call-process-detects-crlf-with-undecided ()
  (let ((stock (fastrevert-call-process-test--same
                (lambda (call)
                  (let ((coding-system-for-read 'undecided))
                    (funcall call "printf" nil t nil "one\\r\\ntwo\\r\\n"))))))
    (should (equal (plist-get stock :text) "one\ntwo\n"))
    (should (eq (plist-get stock :coding) 'undecided-dos))))

(ert-deftest fastrevert-call-process-honours-process-coding-system-alist ()
  (let ((process-coding-system-alist '(("\\`printf\\'" . (latin-1 . latin-1)))))
    (fastrevert-call-process-test--same
     (lambda (call) (funcall call "printf" nil t nil "caf\\351"))))
  (let ((default-process-coding-system '(latin-1-dos . latin-1-dos)))
    (fastrevert-call-process-test--same
     (lambda (call) (funcall call "printf" nil t nil "caf\\351\\r\\n")))))

(ert-deftest fastrevert-call-process-into-unibyte-buffer-like-stock ()
  (dolist (coding '(nil utf-8-dos latin-1))
    (fastrevert-call-process-test--same
     (lambda (call)
       (let ((coding-system-for-read coding))
         (funcall call "printf" nil t nil "caf\\303\\251\\r\\n")))
     (lambda () (set-buffer-multibyte nil)))))

(ert-deftest fastrevert-call-process-leaves-buffer-file-coding-system-alone ()
  (let ((stock (fastrevert-call-process-test--same
                (lambda (call)
                  (let ((coding-system-for-read 'latin-1-dos))
                    (funcall call "printf" nil t nil "caf\\351\\r\\n")))
                (lambda () (setq buffer-file-coding-system 'utf-8-unix)))))
    (should (eq (plist-get stock :file-coding) 'utf-8-unix))))

(ert-deftest fastrevert-call-process-encodes-multibyte-arguments ()
  (fastrevert-call-process-test--same
   (lambda (call) (funcall call "printf" nil t nil "%s|" "héllo" "wörld €"))))

(ert-deftest fastrevert-call-process-large-output-is-identical ()
  "Five megabytes with multibyte characters across every read boundary."
  (fastrevert-test-with-temp-dir dir
    (let ((file (expand-file-name "big" dir)))
      (with-temp-file file
        (set-buffer-file-coding-system 'utf-8-unix)
        (dotimes (i 100000)
          (insert (format "%06d é€😀 line\n" i))))
      (let ((stock (fastrevert-call-process-test--same
                    (lambda (call) (funcall call "cat" nil t nil file)))))
        (should (> (length (plist-get stock :text)) 1500000))))))

(ert-deftest fastrevert-call-process-streamed-output-matches-at-chunk-edges ()
  "Output larger than a chunk is inserted while the child runs, exactly as stock."
  (fastrevert-test-with-temp-dir dir
    (let ((crlf (expand-file-name "crlf" dir))
          (one-line (expand-file-name "one-line" dir))
          (long-lines (expand-file-name "long-lines" dir)))
      (let ((coding-system-for-write 'no-conversion))
        (with-temp-file crlf
          (dotimes (i 200000) (insert (format "%06d é€ crlf line\r\n" i))))
        (with-temp-file one-line
          (dotimes (_ 300000) (insert "no newline here, ")))
        (with-temp-file long-lines
          (dotimes (i 8) (insert (make-string (* 700 1024) (+ ?a i)) "\n"))))
      (dolist (file (list crlf one-line long-lines))
        (dolist (coding '(nil utf-8 utf-8-unix latin-1))
          (ert-info ((format "%s, coding %S" (file-name-nondirectory file) coding))
            (fastrevert-call-process-test--same
             (lambda (call)
               (let ((coding-system-for-read coding))
                 (funcall call "cat" nil t nil file))))))))))

(ert-deftest fastrevert-call-process-display-redisplays-lines-as-they-arrive ()
  "With DISPLAY, a line is in the buffer and redisplayed while the child runs.
The child prints its second line only once the first has been
redisplayed: redisplay creates the file it waits for."
  (fastrevert-test-with-temp-dir dir
    (let* ((go (expand-file-name "go" dir))
           (script (format "printf 'one\\n'; i=0; while [ ! -e %s ] && [ $i -lt 1000 ]; do \
sleep 0.01; i=$((i+1)); done; if [ -e %s ]; then printf 'two\\n'; else printf 'late\\n'; fi"
                           go go))
           (seen nil))
      (cl-letf (((symbol-function 'redisplay)
                 (lambda (&optional _force)
                   (push (buffer-string) seen)
                   (unless (file-exists-p go) (write-region "" nil go nil 'silent)))))
        (with-temp-buffer
          (let ((coding-system-for-read 'utf-8-unix))
            (should (eql 0 (fastrevert-call-process "sh" nil t t "-c" script))))
          (should (equal (buffer-string) "one\ntwo\n"))))
      (should (equal (reverse seen) '("one\n" "one\ntwo\n")))
      ;; Without DISPLAY nothing is redisplayed.
      (setq seen nil)
      (cl-letf (((symbol-function 'redisplay)
                 (lambda (&optional _force) (push (buffer-string) seen))))
        (with-temp-buffer
          (fastrevert-call-process "sh" nil t nil "-c" "printf 'one\\n'; printf 'two\\n'")))
      (should-not seen)))
  ;; What is inserted is what stock inserts.
  (fastrevert-call-process-test--same
   (lambda (call) (funcall call "sh" nil t t "-c" "printf 'a\\nb'; sleep 0.1; printf 'c\\r\\nd\\n'"))))

(ert-deftest fastrevert-call-process-waits-for-output-of-grandchildren ()
  "Like stock, the call ends when the output pipe closes, not when the child exits."
  (fastrevert-call-process-test--same
   (lambda (call)
     (funcall call "sh" nil t nil "-c" "(sleep 0.2; echo late) & echo early"))))

(ert-deftest fastrevert-call-process-output-reopened-through-dev-stdout-is-kept ()
  (fastrevert-call-process-test--same
   (lambda (call)
     (funcall call "sh" nil t nil "-c" "echo one; echo two > /dev/stdout; echo three >/dev/stderr"))))

;;;; Environment, directory and program search

(ert-deftest fastrevert-call-process-passes-environment-and-directory ()
  (let ((process-environment (append '("FASTREVERT_A=first" "FASTREVERT_A=second"
                                       "FASTREVERT_GONE" "FASTREVERT_GONE=never")
                                     process-environment))
        (default-directory "/usr/"))
    (let ((stock (fastrevert-call-process-test--same
                  (lambda (call)
                    (funcall call "sh" nil t nil "-c"
                             "echo \"$FASTREVERT_A ${FASTREVERT_GONE-unset}\"; pwd; echo \"$PWD\"")))))
      (should (string-prefix-p "first unset\n/usr\n" (plist-get stock :text))))
    (fastrevert-call-process-test--same (lambda (call) (funcall call "printenv" nil t)))))

(ert-deftest fastrevert-call-process-environment-follows-every-change ()
  "Each call sees `process-environment' as it is then, however it changed."
  (let ((process-environment (cons "FASTREVERT_V=one" process-environment))
        ;; With no DISPLAY anywhere, a batch Emacs passes none.
        (initial-environment nil)
        (print (lambda ()
                 (with-temp-buffer
                   (fastrevert-call-process
                    "sh" nil t nil "-c"
                    "echo \"${FASTREVERT_V-unset} ${FASTREVERT_W-unset} ${DISPLAY-unset}\"")
                   (buffer-string)))))
    (setenv "DISPLAY")
    (should (equal (funcall print) "one unset unset\n"))
    ;; `setenv' of a defined name replaces the entry in place.
    (setenv "FASTREVERT_V" "two")
    (should (equal (funcall print) "two unset unset\n"))
    (setenv "FASTREVERT_W" "new")
    (should (equal (funcall print) "two new unset\n"))
    (setcar process-environment "FASTREVERT_W=set by setcar")
    (should (equal (funcall print) "two set by setcar unset\n"))
    ;; An entry ends at a NUL byte, as in the C library's environment.
    (push "FASTREVERT_V=before\0FASTREVERT_W=smuggled" process-environment)
    (should (equal (funcall print) "before set by setcar unset\n"))
    (push "DISPLAY=:fastrevert" process-environment)
    (should (equal (funcall print) "before set by setcar :fastrevert\n"))
    (fastrevert-call-process-test--same (lambda (call) (funcall call "printenv" nil t)))))

(ert-deftest fastrevert-call-process-searches-exec-path-and-suffixes ()
  (fastrevert-test-with-temp-dir dir
    (let ((script (expand-file-name "fastrevert-hello.sh" dir)))
      (with-temp-file script (insert "#!/bin/sh\necho hello from \"$0\"\n"))
      (set-file-modes script #o755)
      (let ((exec-path (cons dir exec-path))
            (exec-suffixes '("" ".sh")))
        (fastrevert-call-process-test--same
         (lambda (call) (funcall call "fastrevert-hello" nil t)))))))

(ert-deftest fastrevert-call-process-search-follows-disk-and-settings ()
  "The program search sees files as they are now, not as at an earlier call."
  (fastrevert-test-with-temp-dir dir
    (let* ((early (expand-file-name "early" dir))
           (late (expand-file-name "late" dir))
           (relative (expand-file-name "relative" dir))
           (write (lambda (where text mode)
                    (make-directory where t)
                    (let ((file (expand-file-name "fastrevert-which" where)))
                      (with-temp-file file (insert "#!/bin/sh\necho " text "\n"))
                      (set-file-modes file mode))))
           (run (lambda ()
                  (with-temp-buffer
                    (list (fastrevert-call-process "fastrevert-which" nil t)
                          (buffer-string)))))
           (exec-path (list early late "/bin" "/usr/bin")))
      (make-directory early t)
      (funcall write late "late" #o755)
      (fastrevert-call-process-test--same (lambda (call) (funcall call "fastrevert-which" nil t)))
      (should (equal (funcall run) '(0 "late\n")))
      ;; A program that appears earlier in the path wins from the next call.
      (funcall write early "early" #o755)
      (should (equal (funcall run) '(0 "early\n")))
      ;; One that stops being executable, or becomes a directory, is passed over.
      (set-file-modes (expand-file-name "fastrevert-which" early) #o644)
      (should (equal (funcall run) '(0 "late\n")))
      (delete-file (expand-file-name "fastrevert-which" early))
      (make-directory (expand-file-name "fastrevert-which" early))
      (should (equal (funcall run) '(0 "late\n")))
      (fastrevert-call-process-test--same (lambda (call) (funcall call "fastrevert-which" nil t)))
      ;; A changed exec-path, suffix list or relative entry is honoured.
      (let ((exec-path (list late early)))
        (should (equal (funcall run) '(0 "late\n"))))
      (delete-directory (expand-file-name "fastrevert-which" early))
      (funcall write early "early" #o755)
      (let ((exec-path (list late)) (exec-suffixes '(".sh" "")))
        (funcall write late "late with suffix" #o755)
        (rename-file (expand-file-name "fastrevert-which" late)
                     (expand-file-name "fastrevert-which.sh" late))
        (should (equal (funcall run) '(0 "late with suffix\n"))))
      (funcall write relative "relative" #o755)
      (let ((exec-path (list "relative" early))
            (default-directory (file-name-as-directory dir)))
        (should (equal (funcall run) '(0 "relative\n")))
        (fastrevert-call-process-test--same
         (lambda (call) (funcall call "fastrevert-which" nil t))))
      (should-error (let ((exec-path (list late))) (funcall run)) :type 'file-missing))))

(ert-deftest fastrevert-call-process-missing-program-signals-like-stock ()
  (fastrevert-test-with-temp-dir dir
    (let ((plain (expand-file-name "plain" dir)))
      (with-temp-file plain (insert "x"))
      (dolist (program (list "fastrevert-no-such-program" plain dir
                             (expand-file-name "absent" dir)))
        (let ((stock (fastrevert-call-process-test--same
                      (lambda (call) (funcall call program nil t)))))
          (should (eq (car (plist-get stock :result)) 'signalled)))))))

(ert-deftest fastrevert-call-process-unusable-files-signal-like-stock ()
  (fastrevert-call-process-test--same
   (lambda (call) (funcall call "cat" "/nonexistent/fastrevert-in" t)))
  (fastrevert-call-process-test--same
   (lambda (call) (funcall call "true" nil '(:file "/nonexistent/fastrevert-out"))))
  (fastrevert-call-process-test--same
   (lambda (call) (funcall call "true" nil '(t "/nonexistent/fastrevert-err"))))
  (fastrevert-call-process-test--same
   (lambda (call)
     (let ((default-directory "/nonexistent/fastrevert-dir/"))
       (funcall call "true" nil t)))))

(ert-deftest fastrevert-call-process-wrong-types-signal-wrong-type-argument ()
  (dolist (call (list (lambda (f) (funcall f 12))
                      (lambda (f) (funcall f "echo" nil t nil 12))
                      (lambda (f) (funcall f "echo" nil 'no-such-buffer-symbol))
                      (lambda (f) (funcall f "echo" nil '(:file 12)))))
    (let ((stock (fastrevert-call-process-test--same call)))
      (should (string-prefix-p "(wrong-type-argument " (cadr (plist-get stock :result)))))))

(ert-deftest fastrevert-call-process-read-only-buffer-signals-like-stock ()
  (fastrevert-call-process-test--same
   (lambda (call) (funcall call "printf" nil t nil "x"))
   (lambda () (insert "text") (setq buffer-read-only t))))

(ert-deftest fastrevert-call-process-counts-in-stats ()
  (fastrevert--engine-ensure)
  (let ((before (fastrevert-stats)))
    (with-temp-buffer (fastrevert-call-process "printf" nil t nil "0123456789"))
    (let ((after (fastrevert-stats)))
      (should (= (- (plist-get after :processes) (plist-get before :processes)) 1))
      (should (= (- (plist-get after :bytes-read) (plist-get before :bytes-read)) 10)))))

;;;; Remote directories and quitting

(ert-deftest fastrevert-call-process-remote-directory-delegates-to-process-file ()
  (let ((calls nil))
    (cl-letf (((symbol-function 'process-file)
               (lambda (&rest args) (push (cons default-directory args) calls) 7)))
      (let ((default-directory "/ssh:fastrevert-test-host:/tmp/"))
        (should (eql (fastrevert-call-process "ls" "in" t nil "-l") 7))))
    (should (equal calls '(("/ssh:fastrevert-test-host:/tmp/" "ls" "in" t nil "-l"))))))

(defun fastrevert-call-process-test--quit-at-terminal (destination script &optional coding)
  "Type the quit key while a terminal Emacs waits in `fastrevert-call-process'.
That Emacs runs `sh -c' with SCRIPT (formatted with the file the shell
must write its pid to) into DESTINATION, decoding with CODING when it
is non-nil, and records whether `quit' was signalled, how long the
call took, whether the child still exists, and how much output
reached the buffer.  Return that record."
  (fastrevert-test-with-temp-dir dir
    (let* ((pid-file (expand-file-name "pid" dir))
           (result-file (expand-file-name "result" dir))
           (form
            `(progn
               (require 'fastrevert-call)
               (let* ((start (float-time))
                      (outcome (condition-case nil
                                   (let ((coding-system-for-read ',coding))
                                     (fastrevert-call-process
                                      "sh" nil ',destination nil "-c" ,(format script pid-file))
                                     'finished)
                                 (quit 'quit)))
                      (elapsed (- (float-time) start))
                      (pid (with-temp-buffer
                             (insert-file-contents ,pid-file)
                             (string-to-number (buffer-string)))))
                 (with-temp-file ,result-file
                   (prin1 (list outcome elapsed
                                (file-exists-p (format "/proc/%d" pid))
                                (if (eq ',destination t) (buffer-size (get-buffer "*scratch*")) 0))
                          (current-buffer))))
               (kill-emacs 0))))
      ;; The child has written its pid, so the call is waiting natively.
      (fastrevert-test-quit-at-terminal form pid-file result-file))))

(ert-deftest fastrevert-call-process-quit-kills-and-reaps-the-child ()
  (let ((result (fastrevert-call-process-test--quit-at-terminal
                 nil "echo $$ > %s; exec sleep 30")))
    (should (eq (nth 0 result) 'quit))
    (should (< (nth 1 result) 10))
    (should-not (nth 2 result))))

(ert-deftest fastrevert-call-process-quit-while-streaming-output-into-a-buffer ()
  "A quit during a large output stops the copy thread and the child."
  (let ((result (fastrevert-call-process-test--quit-at-terminal
                 t "head -c 10000000 /dev/zero | tr '\\0' x; echo; echo $$ > %s; exec sleep 30")))
    (should (eq (nth 0 result) 'quit))
    (should (< (nth 1 result) 10))
    (should-not (nth 2 result))
    ;; The chunks inserted before the quit stay, as stock leaves them.
    (should (> (nth 3 result) 2000000))))

(ert-deftest fastrevert-call-process-quit-while-reading-the-pipe-straight-into-the-buffer ()
  "A quit while Emacs reads a long output from the pipe ends child and call.
An output in a coding that cannot be cut is read straight from the
pipe; the quit reaches that read, and the child gets SIGINT.  The
child goes quiet for half a second before the quit: output a child
wrote and then stopped writing is in the buffer by then, as stock
would have it."
  (let ((result (fastrevert-call-process-test--quit-at-terminal
                 t (concat "head -c 100000 /dev/zero | tr '\\0' x; echo; "
                           "sleep 0.5; echo $$ > %s; exec sleep 30")
                 'undecided)))
    (should (eq (nth 0 result) 'quit))
    (should (< (nth 1 result) 10))
    (should-not (nth 2 result))
    ;; What was read before the quit stays, as stock leaves its chunks.
    (should (>= (nth 3 result) 100001))))

(provide 'fastrevert-call-process-test)

;;; fastrevert-call-process-test.el ends here
