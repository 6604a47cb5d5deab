;;; fastrevert-remote-revert-test.el --- Remote buffers revert as stock reverts them -*- lexical-binding: t; -*-

;;; Commentary:

;; The remote host of fastrevert-remote-test.el, with no added delay:
;; how a remote buffer is reverted once its watcher reports a change.
;; Never over a modified buffer, never left half-written, not reverted
;; back after a save of its own, Dired included, and a log followed in
;; tail mode line for line.

;;; Code:

(require 'fastrevert-remote-helpers)
(require 'dired)

(ert-deftest fastrevert-remote-never-reverts-a-modified-buffer ()
  "A buffer with unsaved edits keeps them when its remote file changes."
  (fastrevert-remote-test--with-mode
    (let ((buffer (fastrevert-remote-test--open "fr1" "edited" "disk\n")))
      (fastrevert-remote-test-wait-settled (list buffer))
      (with-current-buffer buffer
        (goto-char (point-max))
        (insert "mine\n"))
      (fastrevert-remote-test-write (fastrevert-remote-test--local "edited") "theirs\n")
      ;; The watcher's line has come and the buffer has been checked.
      (should (fastrevert-test-wait-for
               (lambda () (equal (fastrevert-remote-test-item-size buffer) "7"))
               10))
      (fastrevert-remote-test-wait-checked)
      (should (equal (fastrevert-remote-test-text buffer) "disk\nmine\n"))
      (should (buffer-modified-p buffer))
      ;; Once the edits are undone, as when saved elsewhere, a later change reverts.
      (with-current-buffer buffer (set-buffer-modified-p nil))
      (fastrevert-remote-test-write (fastrevert-remote-test--local "edited") "theirs again\n")
      (should (fastrevert-test-wait-for
               (lambda () (equal (fastrevert-remote-test-text buffer) "theirs again\n"))
               10)))))

(ert-deftest fastrevert-remote-half-written-file-is-never-the-last-reverted ()
  "A file written in pieces ends up whole in its buffer, however the reverts fall."
  (fastrevert-remote-test--with-mode
    (let ((buffer (fastrevert-remote-test--open "fr1" "pieces" "start\n"))
          (file (fastrevert-remote-test--local "pieces")))
      (fastrevert-remote-test-wait-settled (list buffer))
      (dotimes (round 5)
        (let ((text (mapconcat (lambda (i) (format "round %d line %d\n" round i))
                               (number-sequence 1 200) "")))
          ;; The first half, then the rest a moment later, as a slow writer.
          (fastrevert-remote-test-write file (substring text 0 (/ (length text) 2)))
          (sleep-for 0.03)
          (fastrevert-remote-test-write file (substring text (/ (length text) 2)) t)
          (should (fastrevert-test-wait-for
                   (lambda () (equal (fastrevert-remote-test-text buffer) text))
                   10)))))))

(ert-deftest fastrevert-remote-save-here-is-not-reverted-back ()
  "A buffer saved through Tramp is not reverted by its own write."
  (fastrevert-remote-test--with-mode
    (let ((buffer (fastrevert-remote-test--open "fr1" "saved" "one\n")))
      (fastrevert-remote-test-wait-settled (list buffer))
      (let ((reverts (plist-get (fastrevert-remote-stats) :remote-reverts)))
        (with-current-buffer buffer
          (erase-buffer)
          (insert "two\n")
          (save-buffer))
        (should (fastrevert-test-wait-for
                 (lambda () (equal (fastrevert-remote-test-item-size buffer) "4"))
                 10))
        (fastrevert-remote-test-wait-checked)
        (should (= reverts (plist-get (fastrevert-remote-stats) :remote-reverts)))
        (should-not (buffer-modified-p buffer))))))

(ert-deftest fastrevert-remote-dired-buffer-lists-a-new-file ()
  "A remote Dired buffer shows a file created on the host."
  (fastrevert-remote-test--with-mode
    (let ((global-auto-revert-non-file-buffers t))
      (fastrevert-remote-test-write (fastrevert-remote-test--local "present") "x\n")
      (let ((buffer (dired-noselect (fastrevert-remote-test-file "fr1" fastrevert-remote-test--dir))))
        (should (fastrevert-remote--descriptor-p
                 (buffer-local-value 'auto-revert-notify-watch-descriptor buffer)))
        (fastrevert-remote-test-wait-settled (list buffer))
        (fastrevert-remote-test-write (fastrevert-remote-test--local "appeared") "y\n")
        (should (fastrevert-test-wait-for
                 (lambda () (with-current-buffer buffer
                              (save-excursion
                                (goto-char (point-min))
                                (search-forward "appeared" nil t))))
                 15))))))

(ert-deftest fastrevert-remote-tail-mode-follows-a-log-with-nothing-lost-or-doubled ()
  "A log written at 100 lines a second is followed line for line."
  (fastrevert-remote-test--with-mode
    (let* ((file (fastrevert-remote-test--local "app.log"))
           (buffer (fastrevert-remote-test--open "fr1" "app.log" "first\n")))
      (with-current-buffer buffer (auto-revert-tail-mode 1))
      (fastrevert-remote-test-wait-settled (list buffer))
      (fastrevert-remote-test-log-lines file 300 0.01)
      (let ((expected (with-temp-buffer
                        (insert-file-contents file)
                        (buffer-string))))
        (should (fastrevert-test-wait-for
                 (lambda () (equal (fastrevert-remote-test-text buffer) expected))
                 15))
        (should (string-match-p "line 299\n\\'" expected))))))

(provide 'fastrevert-remote-revert-test)

;;; fastrevert-remote-revert-test.el ends here
