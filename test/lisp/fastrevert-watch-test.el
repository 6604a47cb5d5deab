;;; fastrevert-watch-test.el --- Tests of the table of watched buffers -*- lexical-binding: t; -*-

;;; Commentary:

;; The table that finds a watched buffer by its watch id, on its own,
;; without an engine: buffers filed under ids as registering files them.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'fastrevert)
(require 'cl-lib)

(defmacro fastrevert-watch-test--with-table (&rest body)
  "Run BODY with an empty table of watched buffers of its own."
  (declare (indent 0))
  `(let ((fastrevert--watched-buffers (make-vector 0 nil))
         (fastrevert--free-slot nil)
         (fastrevert--registrations 0))
     ,@body))

(defun fastrevert-watch-test--file (buffer)
  "File BUFFER under a new id, give it the descriptor, and return the id."
  (let ((id (fastrevert--next-id)))
    (fastrevert--file-buffer id buffer)
    (with-current-buffer buffer
      (setq auto-revert-notify-watch-descriptor (cons 'fastrevert id)))
    id))

(defun fastrevert-watch-test--release (buffer)
  "Release BUFFER's watch id as unregistering does."
  (with-current-buffer buffer
    (fastrevert--release-id (cdr auto-revert-notify-watch-descriptor))
    (setq auto-revert-notify-watch-descriptor nil)))

(ert-deftest fastrevert-watch-every-buffer-is-found-by-its-id-as-the-table-grows ()
  (fastrevert-watch-test--with-table
    (let ((buffers (cl-loop repeat 300 collect (generate-new-buffer " *watched*"))))
      (unwind-protect
          (let ((ids (mapcar #'fastrevert-watch-test--file buffers)))
            (should (equal (mapcar #'fastrevert--buffer-of ids) buffers))
            (should (equal (fastrevert--watched-buffer-list) buffers))
            (should (= (length (delete-dups (copy-sequence ids))) 300))
            ;; Ids never handed out find nothing.
            (should-not (fastrevert--buffer-of (1+ (apply #'max ids))))
            (should-not (fastrevert--buffer-of -1))
            (should-not (fastrevert--buffer-of (* 5 fastrevert--id-slots)))
            ;; Every other one released, the rest stay found, and new ones
            ;; take the free slots before the table grows.
            (let ((size (length fastrevert--watched-buffers)))
              (cl-loop for buffer in buffers by #'cddr do (fastrevert-watch-test--release buffer))
              (cl-loop for buffer in buffers by #'cddr for id in ids by #'cddr
                       do (should-not (fastrevert--buffer-of id)))
              (cl-loop for buffer in (cdr buffers) by #'cddr for id in (cdr ids) by #'cddr
                       do (should (eq (fastrevert--buffer-of id) buffer)))
              (cl-loop for buffer in buffers by #'cddr
                       do (should (eq (fastrevert--buffer-of (fastrevert-watch-test--file buffer))
                                      buffer)))
              (should (= (length fastrevert--watched-buffers) size))))
        (mapc #'kill-buffer buffers)))))

(ert-deftest fastrevert-watch-a-released-id-finds-nothing-when-its-slot-is-reused ()
  (fastrevert-watch-test--with-table
    (let ((first (generate-new-buffer " *first*"))
          (second (generate-new-buffer " *second*"))
          (fastrevert--pending (make-hash-table :test #'eq)))
      (unwind-protect
          (let ((old (fastrevert-watch-test--file first)))
            (fastrevert-watch-test--release first)
            (let ((new (fastrevert-watch-test--file second)))
              ;; The slot is reused, the id not.
              (should (= (% new fastrevert--id-slots) (% old fastrevert--id-slots)))
              (should-not (= new old))
              (should (eq (fastrevert--buffer-of new) second))
              (should-not (fastrevert--buffer-of old))
              ;; A record for the old watch, still on its way, leaves the
              ;; new one's buffer alone.
              (fastrevert--on-file-changed old 0 "old")
              (should (zerop (hash-table-count fastrevert--pending)))
              ;; Releasing the old id again frees nothing: the second buffer
              ;; keeps its slot, and the next buffer gets another.
              (fastrevert--release-id old)
              (should (eq (fastrevert--buffer-of new) second))
              (let ((third (fastrevert-watch-test--file first)))
                (should-not (= (% third fastrevert--id-slots) (% new fastrevert--id-slots)))
                (should (eq (fastrevert--buffer-of new) second))
                (should (eq (fastrevert--buffer-of third) first)))))
        (kill-buffer first)
        (kill-buffer second)))))

(ert-deftest fastrevert-watch-a-descriptor-says-when-the-engine-watches ()
  (with-temp-buffer
    (should-not (fastrevert--watching-p (current-buffer)))
    (setq auto-revert-notify-watch-descriptor (cons 'fastrevert 7))
    (should (fastrevert--descriptor-p auto-revert-notify-watch-descriptor))
    (should-not (fastrevert--watching-p (current-buffer)))
    (setcar auto-revert-notify-watch-descriptor 'fastrevert-watched)
    (should (fastrevert--descriptor-p auto-revert-notify-watch-descriptor))
    (should (fastrevert--watching-p (current-buffer)))
    (should-not (fastrevert--descriptor-p '(inotify . 7)))
    (should-not (fastrevert--descriptor-p 7))))

(ert-deftest fastrevert-watch-the-engine-hears-which-watched-buffers-are-shown-once-per-change ()
  ;; Where the engine polls watched files (kqueue), it polls those of the
  ;; buffers shown more often; it is told their ids when they change.
  (fastrevert-watch-test--with-table
    (let ((shown (generate-new-buffer " *shown*"))
          (hidden (generate-new-buffer " *hidden*"))
          (plain (generate-new-buffer " *not watched*"))
          (sent nil)
          (fastrevert--visible-ids nil))
      (unwind-protect
          (cl-letf (((symbol-function 'fastrevert--mod-running-p) (lambda () t))
                    ((symbol-function 'fastrevert--mod-watch-visible)
                     (lambda (ids) (push ids sent))))
            (let ((shown-id (fastrevert-watch-test--file shown)))
              (fastrevert-watch-test--file hidden)
              (save-window-excursion
                (delete-other-windows)
                (set-window-buffer (selected-window) shown)
                (set-window-buffer (split-window) plain)
                (should (equal (fastrevert--shown-watch-ids) (list shown-id)))
                (fastrevert--update-visible)
                (fastrevert--update-visible)
                (should (equal sent (list (list shown-id))))
                (set-window-buffer (selected-window) plain)
                (fastrevert--update-visible)
                (should (equal sent (list nil (list shown-id)))))))
        (mapc #'kill-buffer (list shown hidden plain))))))

(provide 'fastrevert-watch-test)

;;; fastrevert-watch-test.el ends here
