FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY mneme ./mneme
COPY schemas ./schemas
COPY services ./services
RUN pip install --no-cache-dir .
ENTRYPOINT []
CMD ["mneme", "serve", "--transport", "http", "--host", "0.0.0.0"]
