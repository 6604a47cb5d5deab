;;; fastrevert-json-lisp-test.el --- The engine's JSON as Lisp, against json-parse-string -*- lexical-binding: t; -*-

;;; Commentary:

;; The engine rewrites a language server's JSON messages as printed
;; Lisp (`fastrevert-lsp-lisp-replies').  `read' of that text must give
;; what `json-parse-string' gives for the JSON, with the settings of
;; each client: jsonrpc's (plists, nil, :json-false) and lsp-mode's
;; (hash tables or plists, nil, nil).  Checked here on chosen edge cases
;; and on seeded random documents; FASTREVERT_TEST_SEED sets the seed,
;; which a failure prints.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'cl-lib)
(require 'fastrevert-engine)

(defconst fastrevert-json-lisp-test--styles
  '((plist nil :json-false) (hash-table nil nil) (plist nil nil) (plist :null :false)
    (plist nil :json-false t) (hash-table nil nil t))
  "The settings of `json-parse-string' the clients use, and one more.
The last two label keys, as the engine does in long messages.")

(defun fastrevert-json-lisp-test--canon (object)
  "Return OBJECT with each hash table made a list, for `equal'.
The list holds the table's test, count and its pairs in order."
  (cond ((hash-table-p object)
         (let (pairs)
           (maphash (lambda (key value)
                      (push (cons key (fastrevert-json-lisp-test--canon value)) pairs))
                    object)
           (list 'hash-table (hash-table-test object) (hash-table-count object)
                 (nreverse pairs))))
        ((vectorp object) (vconcat (mapcar #'fastrevert-json-lisp-test--canon object)))
        ((consp object) (mapcar #'fastrevert-json-lisp-test--canon object))
        (t object)))

(defun fastrevert-json-lisp-test--parse (json style)
  "Return what `json-parse-string' makes of JSON with STYLE, or `error'."
  (condition-case nil
      (fastrevert-json-lisp-test--canon
       (json-parse-string json :object-type (nth 0 style)
                          :null-object (nth 1 style) :false-object (nth 2 style)))
    (error 'error)))

(defun fastrevert-json-lisp-test--odd-key-p (object)
  "Return non-nil if plist OBJECT has a key that is not printable ASCII.
The engine leaves such a document as JSON, whose keyword it cannot print."
  (cond ((vectorp object) (cl-some #'fastrevert-json-lisp-test--odd-key-p object))
        ((consp object)
         (cl-loop for (key value) on object by #'cddr
                  thereis (or (string-match-p "[^ -~]" (symbol-name key))
                              (fastrevert-json-lisp-test--odd-key-p value))))))

(defun fastrevert-json-lisp-test--check (json &optional refused)
  "Check the engine's Lisp for JSON in every style against `json-parse-string'.
With REFUSED non-nil the engine must leave JSON as it is; otherwise
it converts it whenever `json-parse-string' can parse it, save for a
plist key that is not printable ASCII."
  (dolist (style fastrevert-json-lisp-test--styles)
    (let ((lisp (fastrevert--mod-json-to-lisp json style))
          (parsed (fastrevert-json-lisp-test--parse json style)))
      (cond (refused (should-not lisp))
            (lisp
             (let ((read (car (read-from-string lisp))))
               (should (equal (list json style (fastrevert-json-lisp-test--canon read))
                              (list json style parsed)))))
            ((and (eq (car style) 'plist) (fastrevert-json-lisp-test--odd-key-p parsed)))
            (t (should (equal (list json style parsed) (list json style 'error))))))))

(ert-deftest fastrevert-json-lisp-reads-as-json-parse-string-on-edge-cases ()
  "The Lisp of each kind of JSON value reads as `json-parse-string' parses it.
Scalars at the top, empty and nested containers, every escape,
characters of 1 to 4 bytes and surrogate pairs, control characters,
keys that need escaping as symbols, integers at the 64-bit limits,
floats of every form, huge arrays and objects, nesting to the limit,
and invalid text (left alone)."
  (should (fastrevert--mod-json-to-lisp nil nil))
  (dolist (json '("0" "-0" "17" "-17" "9223372036854775807" "-9223372036854775808"
                  "1.5" "-0.0" "0.1" "1e3" "1E3" "1e+3" "2.5e-3" "1e308" "5e-324" "1e-400"
                  "123456789.123456789" "3.141592653589793238462643"
                  "true" "false" "null" "\"\"" "[]" "{}" "[[]]" "[{}]" "{\"a\":{}}"
                  "{\"a\":[]}" " \t\n\r[ 1 , 2 ]\n "
                  "\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\""
                  "\"\\u0001\\u001f\\u007f \\u0080 \\u00ff \\u07ff \\u0800 \\uffff\""
                  "\"\\ud800\\udc00 \\udbff\\udfff \\ud83d\\ude00\""
                  "\"é € 😀 \x7f\""
                  "\"line\nbreak\""
                  "{\"x y\":1,\"a.b\":2,\"?\":3,\"\":4,\"#1\":5,\"'\":6,\"(\":7,\";\":8,\"\\\\\":9}"
                  "{\"\\\"\":1,\"`,@\":2,\"[]\":3,\"1\":4,\"-1.5\":5,\"nil\":6,\"t\":7}"
                  "{\"a\":1,\"b\":[true,false,null,{\"c\":null,\"d\":false}]}"
                  "{\"z\":1,\"y\":2,\"x\":3,\"w\":4}"
                  "[\"\\u00e9\", \"ascii\", \"\", 1, [2, [3, [4]]]]"
                  "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"isIncomplete\":false,\"items\":[{\"label\":\"add_numbers(int a, int b)\",\"kind\":3,\"score\":0.95,\"textEdit\":{\"range\":{\"start\":{\"line\":8,\"character\":9},\"end\":{\"line\":8,\"character\":11}},\"newText\":\"add_numbers\"}}]}}"))
    (fastrevert-json-lisp-test--check json))
  ;; What `json-parse-string' refuses, or would give differently.
  (dolist (json '("" " " "[" "{\"a\":}" "{} {}" "[1,]" "01" "1." ".5" "+1" "NaN" "Infinity"
                  "'a'" "\"\\x\"" "\"\\ud800\"" "\"\\udc00\"" "\"\xff\"" "\"\xc0\xaf\""
                  "9223372036854775808" "-9223372036854775809" "1e400" "-1e400"
                  "\"a\\u0000b\"" "{\"a\":1,\"a\":2}"))
    (fastrevert-json-lisp-test--check json t))
  ;; Huge arrays and objects, and nesting to the limit and past it.
  (fastrevert-json-lisp-test--check
   (concat "[" (mapconcat (lambda (i) (format "{\"n\":%d,\"s\":\"%d\"}" i (- i)))
                          (number-sequence 1 20000) ",")
           "]"))
  (fastrevert-json-lisp-test--check
   (concat "{" (mapconcat (lambda (i) (format "\"k%d\":[%d]" i i)) (number-sequence 1 5000) ",")
           "}"))
  ;; 500 levels read back as 500 vectors, one in the other (walked here:
  ;; `equal' and `print' stop at 200 levels).
  (let ((value (car (read-from-string
                     (fastrevert--mod-json-to-lisp
                      (concat (make-string 500 ?\[) (make-string 500 ?\]))
                      '(plist nil :json-false)))))
        (depth 0))
    (while (and (vectorp value) (= (length value) 1))
      (setq value (aref value 0) depth (1+ depth)))
    (should (equal (list depth value) '(499 []))))
  (fastrevert-json-lisp-test--check (concat (make-string 501 ?\[) (make-string 501 ?\])) t)
  ;; Keys that no keyword prints as: as JSON for plists, converted for
  ;; hash tables.
  (dolist (json '("{\"é\":1}" "{\"a\\nb\":1}" "[{\"ok\":{\"\\u0001\":2}}]"))
    (fastrevert-json-lisp-test--check json)
    (should-not (fastrevert--mod-json-to-lisp json '(plist nil nil)))
    (should (fastrevert--mod-json-to-lisp json '(hash-table nil nil)))))

(defun fastrevert-json-lisp-test--random-string (random)
  "Return JSON text of a random string, drawing from RANDOM."
  (let ((pieces nil))
    (dotimes (_ (funcall random 12))
      (push (pcase (funcall random 9)
              (0 (string (+ ?a (funcall random 26))))
              (1 "\\\"") (2 "\\\\") (3 "\\n")
              (4 (format "\\u%04x" (+ 1 (funcall random #xd7ff))))
              (5 (let ((code (+ #x10000 (funcall random #x100000))))
                   (setq code (- code #x10000))
                   (format "\\u%04x\\u%04x" (+ #xd800 (ash code -10))
                           (+ #xdc00 (logand code #x3ff)))))
              (6 (string (+ #xa0 (funcall random #x2000))))
              (7 (string (+ #x1f300 (funcall random #x300))))
              (_ (string (+ 32 (funcall random 95)))))
            pieces)
      ;; A lone quote or backslash drawn raw would end or break the text.
      (when (member (car pieces) '("\"" "\\")) (setcar pieces "_")))
    (concat "\"" (apply #'concat pieces) "\"")))

(defun fastrevert-json-lisp-test--random-value (random depth)
  "Return JSON text of a random value at most DEPTH deep, drawing from RANDOM."
  (pcase (funcall random (if (> depth 0) 9 6))
    (0 (number-to-string (- (funcall random 2000000) 1000000)))
    (1 (format "%s%d.%de%d" (if (zerop (funcall random 2)) "" "-") (funcall random 1000)
               (funcall random 1000) (- (funcall random 40) 20)))
    (2 (nth (funcall random 3) '("true" "false" "null")))
    (3 (fastrevert-json-lisp-test--random-string random))
    (4 (number-to-string (* (if (zerop (funcall random 2)) 1 -1) most-positive-fixnum)))
    (5 (format "%d.%d" (funcall random 100) (funcall random 1000000)))
    (6 (concat "["
               (mapconcat (lambda (_) (fastrevert-json-lisp-test--random-value random (1- depth)))
                          (number-sequence 1 (funcall random 5)) ", ")
               "]"))
    (_ (let ((keys nil))
         (dotimes (_ (funcall random 6))
           (let ((key (fastrevert-json-lisp-test--random-string random)))
             (unless (member key keys) (push key keys))))
         (concat "{"
                 (mapconcat (lambda (key)
                              (concat key " : "
                                      (fastrevert-json-lisp-test--random-value random (1- depth))))
                            keys ",")
                 "}")))))

(ert-deftest fastrevert-json-lisp-reads-as-json-parse-string-on-random-documents ()
  "The Lisp of 2,000 seeded random JSON documents reads as they parse."
  (should (fastrevert--mod-json-to-lisp nil nil))
  (let* ((seed (let ((given (getenv "FASTREVERT_TEST_SEED")))
                 (if given (string-to-number given) (random 1000000000))))
         (state seed)
         (random (lambda (limit)
                   ;; A linear congruential generator: the same documents
                   ;; for the same seed on every Emacs.
                   (setq state (mod (+ (* state 1103515245) 12345) 2147483648))
                   (mod (ash state -8) limit)))
         (converted 0))
    (message "fastrevert-json-lisp-test: seed %d" seed)
    (dotimes (_ 2000)
      (let ((json (encode-coding-string (fastrevert-json-lisp-test--random-value random 4)
                                        'utf-8)))
        (fastrevert-json-lisp-test--check json)
        (when (fastrevert--mod-json-to-lisp json '(plist nil :json-false))
          (setq converted (1+ converted)))))
    ;; Random keys are unique and printable or not: most documents convert.
    (should (> converted 1000))))

(provide 'fastrevert-json-lisp-test)

;;; fastrevert-json-lisp-test.el ends here
