;;; fastrevert-lsp-test.el --- eglot and lsp-mode on the engine -*- lexical-binding: t; -*-

;;; Commentary:

;; `fastrevert-lsp-mode' against the real clients and server: eglot (as
;; Debian's elpa-eglot installs it on Emacs 28, built in on Emacs 30) and
;; lsp-mode (Debian's elpa-lsp-mode) with Debian's clangd, each session
;; run stock and then with the mode on, with equal answers.  A stand-in
;; server (test/tools/lsp-stand-in.sh) under jsonrpc covers what clangd
;; does not do on demand: an end after output, a crash, a 100 MB reply.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'fastrevert-lsp)
(require 'jsonrpc)

(defconst fastrevert-lsp-test--stand-in
  (expand-file-name "../tools/lsp-stand-in.sh"
                    (file-name-directory (or load-file-name buffer-file-name)))
  "The stand-in server.")

(defconst fastrevert-lsp-test--source
  "#include <stdio.h>

// Adds two numbers: a + b = é, 日本, 😀.
int add_numbers(int a, int b) { return a + b; }
int add_more(int a, int b, int c) { return add_numbers(a, b) + c; }

int main(void) {
  int x = add_numbers(1, 2);
  printf(\"%d\\n\", x + add_more(1, 2, 3));
  return ad
}
"
  "The C file the clangd sessions work on, after its fillers.
The comment's text, not ASCII, comes back in the hover.")

(defconst fastrevert-lsp-test--fillers 800
  "How many small functions main.c begins with.
They make the reply of its document symbols longer than 64 KiB of
JSON, which the engine prints as Lisp with labelled keys; their names
have no \"a\" and so stay out of the completion of \"ad\".")

(defmacro fastrevert-lsp-test--with-project (var &rest body)
  "Bind VAR to a new Git project holding main.c, and run BODY there."
  (declare (indent 1))
  `(fastrevert-test-with-temp-dir ,var
     (let ((default-directory ,var))
       (should (eql 0 (call-process "git" nil nil nil "init" "-q" ".")))
       (with-temp-file (expand-file-name "main.c" ,var)
         (dotimes (i fastrevert-lsp-test--fillers)
           (insert (format "int fill_%d(int v) { return v + %d; }\n" i i)))
         (insert fastrevert-lsp-test--source))
       ,@body)))

(defun fastrevert-lsp-test--own-labels (labels)
  "Return the completion LABELS of main.c's own functions, sorted.
clangd adds the system headers' symbols from its index once that is
ready, which it may be for one session and not yet for the other."
  (sort (seq-filter (lambda (label) (string-match-p "add_" label)) labels) #'string<))

(defun fastrevert-lsp-test--goto (text &optional offset)
  "Move point to the first TEXT in the buffer, plus OFFSET characters."
  (goto-char (point-min))
  (search-forward text)
  (goto-char (+ (match-beginning 0) (or offset 0))))

(defun fastrevert-lsp-test--both (session)
  "Run SESSION stock, then with the mode on; return both results.
SESSION is called with no argument and returns a plist whose
:carried says whether its server processes were carried."
  (let ((stock (progn (fastrevert-lsp-mode -1) (funcall session)))
        (carried (unwind-protect (progn (fastrevert-lsp-mode 1) (funcall session))
                   (fastrevert-lsp-mode -1))))
    (list stock carried)))

(defun fastrevert-lsp-test--carried (session lisp-replies &optional files)
  "Run SESSION with the mode on and `fastrevert-lsp-lisp-replies' LISP-REPLIES.
With FILES, every message printed as Lisp goes through a file.
Return (RESULT READ FILES-READ): how many messages it read as Lisp,
and of them through a file."
  (let ((fastrevert-lsp-lisp-replies lisp-replies)
        (fastrevert-lsp--lisp-file-threshold (if files 1 nil))
        (before fastrevert-lsp--lisp-read)
        (files-before fastrevert-lsp--lisp-files-read))
    (unwind-protect
        (progn (fastrevert-lsp-mode 1)
               (let ((result (funcall session)))
                 (list result (- fastrevert-lsp--lisp-read before)
                       (- fastrevert-lsp--lisp-files-read files-before))))
      (fastrevert-lsp-mode -1))))

(defun fastrevert-lsp-test--three (session)
  "Run SESSION stock, carried as JSON, and carried as Lisp; return the results.
SESSION is as for `fastrevert-lsp-test--both'.  The carried ones run
twice each: with the bodies in the messages, and with every body in a
file of its own.  Only the Lisp ones read messages as Lisp, and they
read some; the ones with files read all their large bodies from files."
  (should (fastrevert--mod-json-to-lisp nil nil))
  (let* ((stock (progn (fastrevert-lsp-mode -1) (funcall session)))
         (json (fastrevert-lsp-test--carried session nil))
         (json-files (fastrevert-lsp-test--carried session nil t))
         (lisp (fastrevert-lsp-test--carried session t))
         (lisp-files (fastrevert-lsp-test--carried session t t)))
    (should (zerop (nth 1 json)))
    (should (zerop (nth 2 json)))
    (should (zerop (nth 1 json-files)))
    (should (> (nth 2 json-files) 0))
    (should (> (nth 1 lisp) 0))
    (should (zerop (nth 2 lisp)))
    (should (> (nth 2 lisp-files) 0))
    (should (= (nth 1 lisp-files) (nth 2 lisp-files)))
    (cons stock (mapcar #'car (list json json-files lisp lisp-files)))))

(defun fastrevert-lsp-test--without (key plist)
  "Return PLIST without KEY."
  (cl-loop for (k v) on plist by #'cddr unless (eq k key) append (list k v)))

;;;; eglot with clangd

(defvar eglot--managed-mode)

(defun fastrevert-lsp-test--eglot-managing (&optional other-than)
  "Wait until eglot manages the current buffer; return its server.
A server `eq' to OTHER-THAN does not count.  eglot 1.9's connect may
return before the server has answered `initialize' (it stops waiting at
the first output of any process, such as the server's stderr) and then
finishes in the background, so its return is no sign of a managed
buffer."
  (should (fastrevert-test-wait-for
           (lambda ()
             (let ((server (and eglot--managed-mode (eglot-current-server))))
               (and server (not (eq server other-than)) server))))))

(defun fastrevert-lsp-test--eglot-session (dir)
  "Work with clangd through eglot on DIR's main.c; return what it answered.
Connect, hover, complete, list the document's symbols, rename,
reconnect and shut down."
  (fastrevert-test-require-debian-package 'eglot)
  (let ((buffer (find-file-noselect (expand-file-name "main.c" dir)))
        (eglot-server-programs '((c-mode . ("clangd"))))
        (eglot-events-buffer-size 0)
        (eglot-autoreconnect nil)
        result)
    (unwind-protect
        (with-current-buffer buffer
          (c-mode)
          (apply #'eglot--connect (eglot--guess-contact))
          (let* ((server (fastrevert-lsp-test--eglot-managing))
                 (process (jsonrpc--process server))
                 (carried (and (fastrevert-lsp--link process) t)))
            (fastrevert-lsp-test--goto "add_numbers(1" 3)
            (setq result
                  (list :hover (jsonrpc-request server :textDocument/hover
                                                (eglot--TextDocumentPositionParams))
                        :symbols (jsonrpc-request server :textDocument/documentSymbol
                                                  `(:textDocument ,(eglot--TextDocumentIdentifier)))))
            (fastrevert-lsp-test--goto "return ad" 9)
            (let ((completion (jsonrpc-request server :textDocument/completion
                                               (eglot--TextDocumentPositionParams))))
              (setq result (append result
                                   (list :completion
                                         (fastrevert-lsp-test--own-labels
                                          (mapcar (lambda (item) (plist-get item :label))
                                                  (plist-get completion :items)))))))
            (fastrevert-lsp-test--goto "add_more(int" 2)
            (setq result (append result
                                 (list :rename
                                       (jsonrpc-request server :textDocument/rename
                                                        `(,@(eglot--TextDocumentPositionParams)
                                                          :newName "sum_more")))))
            (eglot-reconnect server)
            (let* ((again (fastrevert-lsp-test--eglot-managing server))
                   (again-process (jsonrpc--process again)))
              (should (not (eq again server)))
              (should (not (process-live-p process)))
              (should (process-live-p again-process))
              (setq result (append result
                                   (list :carried (list carried
                                                        (and (fastrevert-lsp--link again-process) t))
                                         :command (process-command again-process)
                                         :type (process-type again-process))))
              (fastrevert-lsp-test--goto "add_numbers(1" 3)
              (setq result (append result
                                   (list :hover-again
                                         (jsonrpc-request again :textDocument/hover
                                                          (eglot--TextDocumentPositionParams)))))
              (eglot-shutdown again)
              (should (fastrevert-test-wait-for (lambda () (not (process-live-p again-process)))))
              ;; Whether the server exits of itself or is killed depends
              ;; on whether it read eglot's exit notification before eglot
              ;; deletes it, a race stock has too.
              (setq result (append result
                                   (list :after-shutdown
                                         (and (memq (process-status again-process) '(exit signal))
                                              t)))))))
      (with-current-buffer buffer (set-buffer-modified-p nil))
      (kill-buffer buffer))
    result))

(ert-deftest fastrevert-lsp-eglot-clangd-answers-as-stock ()
  "An eglot session with clangd answers the same with the mode on.
Hover, completion, document symbols, rename, reconnect and shutdown,
with the server's messages handed over as JSON and as Lisp; the
carried servers are real processes that show the client's command."
  (should (executable-find "clangd"))
  (fastrevert-lsp-test--with-project dir
    (pcase-let ((`(,stock . ,carried-runs)
                 (fastrevert-lsp-test--three
                  (lambda () (fastrevert-lsp-test--eglot-session dir)))))
      (should (equal (plist-get stock :carried) '(nil nil)))
      (should (cl-some (lambda (label) (string-match-p "add_numbers" label))
                       (plist-get stock :completion)))
      (should (string-match-p "日本, 😀" (format "%s" (plist-get stock :hover))))
      (should (plist-get stock :rename))
      (should (> (length (plist-get stock :symbols)) fastrevert-lsp-test--fillers))
      (dolist (carried carried-runs)
        (should (equal (plist-get carried :carried) '(t t)))
        (should (equal (plist-get carried :command) '("clangd")))
        (should (eq (plist-get carried :type) 'real))
        (should (equal (fastrevert-lsp-test--without :carried carried)
                       (fastrevert-lsp-test--without :carried stock)))))))

;;;; lsp-mode with clangd

(defvar lsp-session-file)
(defvar lsp-auto-guess-root)
(defvar lsp-enable-snippet)
(defvar lsp-keep-workspace-alive)
(defvar lsp-restart)
(defvar lsp--buffer-workspaces)
(defvar lsp-clients-clangd-args)
(declare-function lsp "lsp-mode" (&optional arg))
(declare-function lsp-request "lsp-mode" (method params &rest args))
(declare-function lsp--workspace-status "lsp-mode" (workspace))
(declare-function lsp--workspace-proc "lsp-mode" (workspace))
(declare-function lsp--text-document-position-params "lsp-mode" (&optional identifier position))
(declare-function lsp--text-document-identifier "lsp-mode" ())
(declare-function lsp-workspace-restart "lsp-mode" (workspace))
(declare-function lsp-workspace-shutdown "lsp-mode" (workspace))

(defun fastrevert-lsp-test--lsp-ready ()
  "Return the buffer's lsp-mode workspace once it is initialized."
  (let ((workspace (car lsp--buffer-workspaces)))
    (and workspace (eq (lsp--workspace-status workspace) 'initialized) workspace)))

(defun fastrevert-lsp-test--lsp-mode-session (dir)
  "Work with clangd through lsp-mode on DIR's main.c; return what it answered.
Connect, hover, complete, list the document's symbols, restart the
workspace and shut it down.  Answers are given as JSON text, since
lsp-mode gives hash tables."
  (fastrevert-test-require-debian-package 'lsp-mode)
  (require 'lsp-clangd)
  (let ((lsp-session-file (make-temp-file "fastrevert-lsp-session"))
        (lsp-auto-guess-root t)
        (lsp-enable-snippet nil)
        (lsp-keep-workspace-alive nil)
        (lsp-restart 'ignore)
        (buffer (find-file-noselect (expand-file-name "main.c" dir)))
        result)
    (unwind-protect
        (with-current-buffer buffer
          (c-mode)
          (lsp)
          (let* ((workspace (fastrevert-test-wait-for #'fastrevert-lsp-test--lsp-ready 30))
                 (process (lsp--workspace-proc workspace))
                 (carried (and (fastrevert-lsp--link process) t)))
            (fastrevert-lsp-test--goto "add_numbers(1" 3)
            (setq result
                  (list :hover (json-encode (lsp-request "textDocument/hover"
                                                         (lsp--text-document-position-params)))
                        :symbols (json-encode
                                  (lsp-request "textDocument/documentSymbol"
                                               `(:textDocument ,(lsp--text-document-identifier))))))
            (fastrevert-lsp-test--goto "return ad" 9)
            (let ((completion (lsp-request "textDocument/completion"
                                           (lsp--text-document-position-params))))
              (setq result
                    (append result
                            (list :completion
                                  (fastrevert-lsp-test--own-labels
                                   (mapcar (lambda (item) (gethash "label" item))
                                           (gethash "items" completion)))))))
            (lsp-workspace-restart workspace)
            (should (fastrevert-test-wait-for (lambda () (not (process-live-p process))) 10))
            (let* ((again (fastrevert-test-wait-for
                           (lambda ()
                             (let ((ready (fastrevert-lsp-test--lsp-ready)))
                               (and ready (not (eq ready workspace)) ready)))
                           30))
                   (again-process (lsp--workspace-proc again)))
              (fastrevert-lsp-test--goto "add_numbers(1" 3)
              (setq result
                    (append result
                            (list :hover-again
                                  (json-encode (lsp-request "textDocument/hover"
                                                            (lsp--text-document-position-params)))
                                  :carried (list carried
                                                 (and (fastrevert-lsp--link again-process) t))
                                  :command (process-command again-process))))
              (lsp-workspace-shutdown again)
              (should (fastrevert-test-wait-for (lambda () (not (process-live-p again-process)))
                                                10))
              ;; lsp-mode forgets the workspace in its sentinel, which may
              ;; run after the process is seen dead; a session started
              ;; before then would join the dead workspace.
              (should (fastrevert-test-wait-for
                       (lambda () (not (memq again lsp--buffer-workspaces)))
                       10)))))
      (with-current-buffer buffer (set-buffer-modified-p nil))
      (kill-buffer buffer)
      (delete-file lsp-session-file))
    result))

(ert-deftest fastrevert-lsp-lsp-mode-clangd-answers-as-stock ()
  "An lsp-mode session with clangd answers the same with the mode on.
Hover, completion, document symbols, workspace restart and shutdown,
with the server's messages handed over as JSON and as Lisp."
  (should (executable-find "clangd"))
  (fastrevert-lsp-test--with-project dir
    (pcase-let ((`(,stock . ,carried-runs)
                 (fastrevert-lsp-test--three
                  (lambda () (fastrevert-lsp-test--lsp-mode-session dir)))))
      (should (equal (plist-get stock :carried) '(nil nil)))
      (should (cl-some (lambda (label) (string-match-p "add_numbers" label))
                       (plist-get stock :completion)))
      (should (string-match-p "日本, 😀" (format "%s" (plist-get stock :hover))))
      (should (> (length (plist-get stock :symbols)) (* 64 1024)))
      (dolist (carried carried-runs)
        (should (equal (plist-get carried :carried) '(t t)))
        (should (equal (car (plist-get carried :command)) "clangd"))
        (should (equal (fastrevert-lsp-test--without :carried carried)
                       (fastrevert-lsp-test--without :carried stock)))))))

;;;; A stand-in server under jsonrpc

(defun fastrevert-lsp-test--connect (name &rest arguments)
  "Start the stand-in server with ARGUMENTS under a jsonrpc connection NAME.
Return (CONNECTION . STATE), STATE a plist that gathers :notes, the
notification methods received, newest first, and :params, their
parameters; :end, once the connection shut down:
the process status and exit status; and :order, newest first, `output'
for each run of calls of the process's filter and `end' for the end."
  (let* ((state (list :notes nil :end nil))
         (connection
          (make-instance
           'jsonrpc-process-connection
           :name name
           :process (lambda ()
                      (make-process
                       :name name
                       :command (cons "sh" (cons fastrevert-lsp-test--stand-in arguments))
                       :connection-type 'pipe
                       :coding 'utf-8-emacs-unix
                       :noquery t
                       :stderr (get-buffer-create (format "*%s stderr*" name))))
           :notification-dispatcher
           (lambda (_connection method params)
             (plist-put state :notes (cons method (plist-get state :notes)))
             (plist-put state :params (cons params (plist-get state :params))))
           :on-shutdown
           (lambda (connection)
             (let ((process (jsonrpc--process connection)))
               (plist-put state :order (cons 'end (plist-get state :order)))
               (plist-put state :end (list (process-status process)
                                           (process-exit-status process))))))))
    ;; What reached the process's filter, and when against its end: jsonrpc
    ;; may dispatch a message later (Emacs 30's does, from a timer).
    (add-function :before (process-filter (jsonrpc--process connection))
                  (lambda (&rest _)
                    (unless (eq (car (plist-get state :order)) 'output)
                      (plist-put state :order (cons 'output (plist-get state :order))))))
    (cons connection state)))

(defun fastrevert-lsp-test--end (how &rest arguments)
  "Run the stand-in that ends as HOW and ARGUMENTS ask; return what was seen.
The value is the :end of `fastrevert-lsp-test--connect', and whether
the process was carried."
  (pcase-let* ((`(,connection . ,state)
                (apply #'fastrevert-lsp-test--connect "fastrevert-stand-in" "end" how arguments))
               (carried (and (fastrevert-lsp--link (jsonrpc--process connection)) t)))
    (should (fastrevert-test-wait-for (lambda () (plist-get state :end)) 10))
    (should (fastrevert-test-wait-for (lambda () (plist-get state :notes)) 10))
    (list (list (plist-get state :end) (reverse (plist-get state :order))
                (plist-get state :notes))
          carried)))

(ert-deftest fastrevert-lsp-server-end-reaches-the-sentinel-after-its-output ()
  "A server that writes and ends is told to the client as stock tells it.
Its last message is handled before the client hears of the end, with
stock's status, whether it exits with a code or dies of a signal."
  (dolist (end '(("exit" "3") ("exit" "0") ("signal" "TERM")))
    (pcase-let ((`(,stock ,carried)
                 (fastrevert-lsp-test--both (lambda () (apply #'fastrevert-lsp-test--end end)))))
      (should (equal (cadr stock) nil))
      (should (equal (cadr carried) t))
      (should (equal (cadr (car stock)) '(output end)))
      (should (equal (car carried) (car stock))))))

(defun fastrevert-lsp-test--quits (count)
  "Have the stand-in write COUNT numbered notifications while quits come.
A timer sets `quit-flag' every 2 ms, as a C-g typed again and again
would; the wait takes each quit and waits again.  Return the numbers
the client got, in the order it got them, and whether any quit came.
The value has the process's carried state last."
  (pcase-let* ((`(,connection . ,state)
                (fastrevert-lsp-test--connect "fastrevert-quits" "count" (number-to-string count)))
               (carried (and (fastrevert-lsp--link (jsonrpc--process connection)) t))
               (quits 0)
               (timer nil))
    (unwind-protect
        (let ((deadline (+ (float-time) 60)))
          (setq timer (run-with-timer 0.002 0.002 (lambda () (setq quit-flag t))))
          (jsonrpc-notify connection :go nil)
          (while (and (< (length (plist-get state :params)) count)
                      (< (float-time) deadline))
            (condition-case nil
                (accept-process-output nil 0.05)
              (quit (setq quits (1+ quits))))))
      (when timer (cancel-timer timer))
      (setq quit-flag nil)
      (jsonrpc-shutdown connection))
    (list (mapcar (lambda (params) (plist-get params :n)) (reverse (plist-get state :params)))
          (> quits 0)
          carried)))

(ert-deftest fastrevert-lsp-quits-while-messages-arrive-lose-none ()
  "Quits while a server's messages arrive lose none, and keep their order.
Stock and carried, 2,000 notifications with a quit every 2 ms."
  (pcase-let ((`(,stock ,carried)
               (fastrevert-lsp-test--both (lambda () (fastrevert-lsp-test--quits 2000)))))
    (should (equal stock (list (number-sequence 1 2000) t nil)))
    (should (equal carried (list (number-sequence 1 2000) t t)))))

(defun fastrevert-lsp-test--gone-p (pid)
  "Return non-nil if process PID has ended (or is a zombie nobody reaped yet)."
  (let ((attributes (process-attributes pid)))
    (or (null attributes) (equal (alist-get 'state attributes) "Z"))))

(ert-deftest fastrevert-lsp-killing-emacs-leaves-no-server ()
  "An Emacs that exits with a carried server running leaves no server behind.
Nor its named pipes, which a server ended before it opened them cannot remove."
  (let* ((result (fastrevert-test-batch-emacs
                  (list fastrevert-test-lisp-directory
                        (file-name-directory (locate-library "fastrevert-lsp-test")))
                  `(progn
                     (require 'fastrevert-lsp-test)
                     (fastrevert-lsp-mode 1)
                     (let* ((process (jsonrpc--process
                                      (car (fastrevert-lsp-test--connect "fastrevert-exit" "wait"))))
                            (link (fastrevert-lsp--link process)))
                       (princ (format "\nserver: %S\n"
                                      (list (process-id process) (and link t)
                                            (and link (fastrevert-lsp--link-directory link)))))
                       (kill-emacs 0)))))
         (printed (and (string-match "^server: \\(.*\\)$" (cdr result))
                       (car (read-from-string (match-string 1 (cdr result))))))
         (pid (car-safe printed)))
    (should (equal (car result) 0))
    ;; The server ran, carried.
    (should (natnump pid))
    (should (eq (nth 1 printed) t))
    (should (fastrevert-test-wait-for (lambda () (fastrevert-lsp-test--gone-p pid))))
    (should (stringp (nth 2 printed)))
    (should-not (file-exists-p (nth 2 printed)))))

(ert-deftest fastrevert-lsp-delivers-a-100-mb-reply-whole ()
  "A 100 MB reply reaches the client's filter whole, in one call."
  (fastrevert-lsp-mode 1)
  (unwind-protect
      (pcase-let* ((size 100000000)
                   (`(,connection . ,_state)
                    (fastrevert-lsp-test--connect "fastrevert-big" "reply" (number-to-string size)))
                   (process (jsonrpc--process connection))
                   (calls 0)
                   (count (lambda (&rest _) (setq calls (1+ calls)))))
        (should (fastrevert-lsp--link process))
        (add-function :before (process-filter process) count)
        (let ((reply (jsonrpc-request connection :big nil :timeout 120)))
          (should (stringp reply))
          (should (eql (length reply) size))
          (should (eql (string-match-p "[^a]" reply) nil))
          (should (eql calls 1)))
        (jsonrpc-shutdown connection))
    (fastrevert-lsp-mode -1)))

(ert-deftest fastrevert-lsp-killing-the-process-buffer-leaves-no-server ()
  "Killing a carried server's process buffer ends the server, as stock."
  (fastrevert-lsp-mode 1)
  (unwind-protect
      (pcase-let* ((`(,connection . ,state) (fastrevert-lsp-test--connect "fastrevert-wait" "wait"))
                   (process (jsonrpc--process connection))
                   (pid (process-id process)))
        (should (fastrevert-lsp--link process))
        (should (eql 0 (signal-process pid 0)))
        (kill-buffer (process-buffer process))
        (should (fastrevert-test-wait-for (lambda () (plist-get state :end))))
        (should (fastrevert-test-wait-for (lambda () (not (eql 0 (signal-process pid 0)))))))
    (fastrevert-lsp-mode -1)))

(ert-deftest fastrevert-lsp-an-idle-carried-server-costs-emacs-nothing ()
  "While a carried server runs and says nothing, Emacs's waits sleep.
A server whose standard output Emacs sees closed while it runs would
make every wait of Emacs's spin until the server exits."
  (fastrevert-lsp-mode 1)
  (unwind-protect
      (pcase-let* ((`(,connection . ,_state) (fastrevert-lsp-test--connect "fastrevert-idle" "wait"))
                   (process (jsonrpc--process connection))
                   (main (fastrevert-test-main-thread-seconds))
                   (deadline (+ (float-time) 1.0)))
        (should (fastrevert-lsp--link process))
        (while (< (float-time) deadline)
          (accept-process-output nil 0.1))
        ;; A spinning wait would take the whole second.
        (should (< (- (fastrevert-test-main-thread-seconds) main) 0.25))
        (should (process-live-p process))
        (jsonrpc-shutdown connection))
    (fastrevert-lsp-mode -1)))

(ert-deftest fastrevert-lsp-carries-only-local-pipe-servers ()
  "Only local servers on pipes, started by a client's connection, are carried.
Servers on a pseudo-terminal or a remote host stay stock."
  (let ((fastrevert-lsp--carrying (list 'carrying)))
    (should (fastrevert-lsp--carry-p '(:command ("sh") :connection-type pipe)))
    (should-not (fastrevert-lsp--carry-p '(:command ("sh") :connection-type pty)))
    (should-not (fastrevert-lsp--carry-p '(:command ("fastrevert-no-such-program")
                                           :connection-type pipe)))
    (let ((default-directory "/ssh:fastrevert-nowhere:/tmp/"))
      (should-not (fastrevert-lsp--carry-p '(:command ("sh") :connection-type pipe
                                             :file-handler t)))))
  (should-not (fastrevert-lsp--carry-p '(:command ("sh") :connection-type pipe))))

(ert-deftest fastrevert-lsp-mode-off-starts-servers-stock ()
  "With the mode off, a jsonrpc connection's server is stock and nothing is advised."
  (fastrevert-lsp-mode 1)
  (fastrevert-lsp-mode -1)
  (should-not (advice-member-p #'fastrevert-lsp--make-process 'make-process))
  (should-not (advice-member-p #'fastrevert-lsp--send-string 'process-send-string))
  (pcase-let* ((`(,connection . ,state) (fastrevert-lsp-test--connect "fastrevert-off" "wait"))
               (process (jsonrpc--process connection)))
    (should-not (fastrevert-lsp--link process))
    (should (eq (process-sentinel process) #'jsonrpc--process-sentinel))
    (delete-process process)
    (should (fastrevert-test-wait-for (lambda () (plist-get state :end))))))

(provide 'fastrevert-lsp-test)

;;; fastrevert-lsp-test.el ends here
