// This file serves the Files API as the genai SDK uses it for batch jobs:
// the resumable upload (start, then upload / upload, finalize chunks), the
// file's metadata and its download.

package geminisim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxFileBytes bounds one file (the real API takes 2 GB; the simulator
// keeps files in memory).
const maxFileBytes = 256 << 20

// simFile is an uploaded (or batch output) file.
type simFile struct {
	id, displayName, mimeType string
	data                      []byte
	created                   time.Time
}

// upload is a resumable upload in progress.
type upload struct {
	displayName, mimeType string
	data                  []byte
}

func (s *Server) serveFiles(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/upload/v1beta/files" && r.Method == http.MethodPost:
		if !s.keyOK(r) {
			writeBadKey(w)
			return true
		}
		if id := r.URL.Query().Get("upload_id"); id != "" {
			s.uploadChunk(w, r, id)
		} else {
			s.startUpload(w, r)
		}
		return true
	case strings.HasPrefix(p, "/v1beta/files/") && r.Method == http.MethodGet:
		if !s.keyOK(r) {
			writeBadKey(w)
			return true
		}
		id, download := strings.CutSuffix(strings.TrimPrefix(p, "/v1beta/files/"), ":download")
		s.mu.Lock()
		f := s.batch().files[id]
		s.mu.Unlock()
		switch {
		case f == nil:
			writeError(w, http.StatusNotFound, "NOT_FOUND", "File files/"+id+" not found.")
		case download:
			s.observe(EventResults)
			w.Header().Set("Content-Type", f.mimeType)
			w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
			w.WriteHeader(http.StatusOK)
			w.Write(f.data) //nolint:errcheck // the client may be gone
		default:
			writeJSON(w, http.StatusOK, fileJSON(f, r))
		}
		return true
	}
	return false
}

// startUpload answers the resumable protocol's start command with the URL
// to send the bytes to.
func (s *Server) startUpload(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Goog-Upload-Protocol") != "resumable" || r.Header.Get("X-Goog-Upload-Command") != "start" {
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Only the resumable upload protocol is served: send X-Goog-Upload-Protocol: resumable and X-Goog-Upload-Command: start.")
		return
	}
	s.observe(EventUpload)
	var body struct {
		File struct {
			DisplayName string `json:"displayName"`
			MIMEType    string `json:"mimeType"`
		} `json:"file"`
	}
	_ = decodeOptional(r, &body)
	mime := r.Header.Get("X-Goog-Upload-Header-Content-Type")
	if mime == "" {
		mime = body.File.MIMEType
	}
	s.mu.Lock()
	b := s.batch()
	b.seq++
	id := s.resourceID('u', b.seq)
	b.uploads[id] = &upload{displayName: body.File.DisplayName, mimeType: mime}
	s.mu.Unlock()
	w.Header().Set("X-Goog-Upload-Url", "http://"+r.Host+"/upload/v1beta/files?upload_id="+id)
	w.Header().Set("X-Goog-Upload-Status", "active")
	writeJSON(w, http.StatusOK, map[string]any{})
}

// uploadChunk appends one chunk at its offset; "upload, finalize" turns
// the upload into a file.
func (s *Server) uploadChunk(w http.ResponseWriter, r *http.Request, id string) {
	cmd := r.Header.Get("X-Goog-Upload-Command")
	offset, err := strconv.ParseInt(r.Header.Get("X-Goog-Upload-Offset"), 10, 64)
	if err != nil || !strings.HasPrefix(cmd, "upload") {
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Send X-Goog-Upload-Command: upload[, finalize] and X-Goog-Upload-Offset.")
		return
	}
	chunk, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFileBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Upload body: "+err.Error())
		return
	}
	s.mu.Lock()
	b := s.batch()
	u := b.uploads[id]
	switch {
	case u == nil:
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "NOT_FOUND", "Upload "+id+" not found or already finalized.")
		return
	case offset != int64(len(u.data)):
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("Upload offset %d, expected %d.", offset, len(u.data)))
		return
	case len(u.data)+len(chunk) > maxFileBytes:
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "File too large for the simulator.")
		return
	}
	u.data = append(u.data, chunk...)
	if !strings.Contains(cmd, "finalize") {
		s.mu.Unlock()
		w.Header().Set("X-Goog-Upload-Status", "active")
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	delete(b.uploads, id)
	f := &simFile{id: id, displayName: u.displayName, mimeType: u.mimeType, data: u.data, created: s.now()}
	b.files[id] = f
	s.mu.Unlock()
	w.Header().Set("X-Goog-Upload-Status", "final")
	writeJSON(w, http.StatusOK, map[string]any{"file": fileJSON(f, r)})
}

// fileJSON is a File resource as the API returns it.
func fileJSON(f *simFile, r *http.Request) map[string]any {
	base := "http://" + r.Host + "/v1beta/files/" + f.id
	return map[string]any{
		"name":           "files/" + f.id,
		"displayName":    f.displayName,
		"mimeType":       f.mimeType,
		"sizeBytes":      strconv.Itoa(len(f.data)),
		"createTime":     f.created.UTC().Format(time.RFC3339Nano),
		"updateTime":     f.created.UTC().Format(time.RFC3339Nano),
		"state":          "ACTIVE",
		"source":         "UPLOADED",
		"uri":            base,
		"downloadUri":    base + ":download?alt=media",
		"expirationTime": f.created.Add(48 * time.Hour).UTC().Format(time.RFC3339Nano),
	}
}

// decodeOptional reads a small JSON body into v; an empty or unreadable
// body leaves v as it was.
func decodeOptional(r *http.Request, v any) error {
	return json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v)
}
